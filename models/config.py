"""Model configurations: frozen, validated, registered by name.

The 13B shapes follow the Obscura paper (docs/obscura.md, section 9): its 18B,
23B and 28B models are the 13B model with more layers. We add 16 layers per step
(40 -> 56 -> 72 -> 88): 16 keeps every layer count divisible by p = 8 stages (and
by 4 for the 4-GPU platform), so the paper's even split of 2L/p units per stage is
exact, and it lands on the nominal sizes:
  llama2-13b 40 layers = 13.02B, 18b 56 = 18.09B, 23b 72 = 23.17B, 28b 88 = 28.24B;
  gpt3-13b   40 layers = 13.12B, 18b 56 = 18.16B, 23b 72 = 23.19B, 28b 88 = 28.22B.
Pipeline configs keep embeddings untied (GPT-3 tied them): a tied table would be
shared by the first and last stage; tie_embeddings=True works only when embed and
head share one stage.
(`tests/models/test_config.py` checks these counts.)
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from models.errors import ModelConfigError
from models.registry import family_names, get_family

DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
DTYPES = tuple(DTYPE_BYTES)
ATTENTION_IMPLS = ("xla", "cudnn")


@dataclass(frozen=True)
class ModelConfig:
    name: str
    family: str                     # a registered family: "llama", "gpt" or your own
    vocab_size: int
    hidden: int
    num_layers: int
    num_heads: int
    num_kv_heads: int               # < num_heads: grouped-query attention (llama only)
    ffn_hidden: int
    max_seq_len: int                # GPT: size of the learned position table
    norm_eps: float = 1e-5
    rope_theta: float = 10000.0     # llama only
    tie_embeddings: bool = False
    param_dtype: str = "float32"
    compute_dtype: str = "bfloat16"
    attention_impl: str | None = None  # None: cuDNN flash on GPU with 16-bit compute, else XLA

    def __post_init__(self):
        def bad(msg):
            raise ModelConfigError(f"model config {self.name!r}: {msg}")

        if not isinstance(self.name, str) or not self.name:
            raise ModelConfigError("model config needs a non-empty name")
        if self.family not in family_names():
            bad(f"family must be one of {', '.join(family_names())}, got {self.family!r} (a family "
                "of your own is registered by its module: --model-module)")
        for f in ("vocab_size", "hidden", "num_layers", "num_heads", "num_kv_heads",
                  "ffn_hidden", "max_seq_len"):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                bad(f"{f} must be a positive integer, got {v!r}")
        if self.hidden % self.num_heads:
            bad(f"hidden {self.hidden} is not divisible by num_heads {self.num_heads}")
        if self.num_heads % self.num_kv_heads:
            bad(f"num_heads {self.num_heads} is not divisible by num_kv_heads {self.num_kv_heads}")
        if not (isinstance(self.norm_eps, (int, float)) and self.norm_eps > 0):
            bad(f"norm_eps must be > 0, got {self.norm_eps!r}")
        if not (isinstance(self.rope_theta, (int, float)) and self.rope_theta > 0):
            bad(f"rope_theta must be > 0, got {self.rope_theta!r}")
        if not isinstance(self.tie_embeddings, bool):
            bad(f"tie_embeddings must be a bool, got {self.tie_embeddings!r}")
        for f in ("param_dtype", "compute_dtype"):
            if getattr(self, f) not in DTYPES:
                bad(f"{f} must be one of {', '.join(DTYPES)}, got {getattr(self, f)!r}")
        if self.attention_impl is not None and self.attention_impl not in ATTENTION_IMPLS:
            bad(f"attention_impl must be one of {', '.join(ATTENTION_IMPLS)} or None, "
                f"got {self.attention_impl!r}")
        family = get_family(self.family)
        if family.check is not None:
            family.check(self)

    @property
    def head_dim(self) -> int:
        return self.hidden // self.num_heads

    @property
    def num_units(self) -> int:
        """2L+2 (embed, attn_i, mlp_i, head), or L+2 for a parallel-block family."""
        from models.registry import get_family  # lazy: the registry imports this module's users
        return len(get_family(self.family).layer_kinds) * self.num_layers + 2

    @property
    def compute_bytes(self) -> int:
        """Bytes of one activation element in the compute dtype."""
        return DTYPE_BYTES[self.compute_dtype]

    def replace(self, **overrides) -> "ModelConfig":
        return _replace(self, overrides)


def _replace(cfg: ModelConfig, overrides: dict) -> ModelConfig:
    fields = {f.name for f in dataclasses.fields(ModelConfig)}
    unknown = sorted(set(overrides) - fields)
    if unknown:
        raise ModelConfigError(
            f"unknown model config field(s) {', '.join(unknown)}; valid: {', '.join(sorted(fields))}")
    return dataclasses.replace(cfg, **overrides)


def _llama2_13b(name: str, num_layers: int) -> ModelConfig:
    return ModelConfig(name=name, family="llama", vocab_size=32000, hidden=5120,
                       num_layers=num_layers, num_heads=40, num_kv_heads=40,
                       ffn_hidden=13824, max_seq_len=4096)


def _gpt3_13b(name: str, num_layers: int) -> ModelConfig:
    # GPT-3 13B (Brown et al. table 2.1) with Megatron's usual d_model 5120 (128-dim
    # heads; the paper's 5140 is not divisible by 40). Vocab 50257 is padded to
    # 50304 (a multiple of 128) as Megatron does; seq 4096 as in Obscura's runs, so
    # the learned position table has 4096 rows.
    return ModelConfig(name=name, family="gpt", vocab_size=50304, hidden=5120,
                       num_layers=num_layers, num_heads=40, num_kv_heads=40,
                       ffn_hidden=4 * 5120, max_seq_len=4096)


CONFIGS: dict[str, ModelConfig] = {
    "llama2-7b": ModelConfig(name="llama2-7b", family="llama", vocab_size=32000, hidden=4096,
                             num_layers=32, num_heads=32, num_kv_heads=32, ffn_hidden=11008,
                             max_seq_len=4096),
    "llama2-13b": _llama2_13b("llama2-13b", 40),
    "llama2-18b": _llama2_13b("llama2-18b", 56),
    "llama2-23b": _llama2_13b("llama2-23b", 72),
    "llama2-28b": _llama2_13b("llama2-28b", 88),
    "gpt3-13b": _gpt3_13b("gpt3-13b", 40),
    "gpt3-18b": _gpt3_13b("gpt3-18b", 56),
    "gpt3-23b": _gpt3_13b("gpt3-23b", 72),
    "gpt3-28b": _gpt3_13b("gpt3-28b", 88),
    # The LLaMA-30B shape of the layout-sweep paper (docs/layouts.md: its "30B"); the
    # sweep runs it at seq 8192, so the position limit is 8192 (RoPE has no table).
    "llama-30b": ModelConfig(name="llama-30b", family="llama", vocab_size=32000, hidden=6656,
                             num_layers=60, num_heads=52, num_kv_heads=52, ffn_hidden=17920,
                             max_seq_len=8192),
    # CPU configs: byte-level vocab (256), fp32 throughout, 4 layers = 10 units so
    # pipelines of up to 10 stages can be built; GQA (2 kv heads) is exercised.
    "llama2-tiny": ModelConfig(name="llama2-tiny", family="llama", vocab_size=256, hidden=64,
                               num_layers=4, num_heads=4, num_kv_heads=2, ffn_hidden=176,
                               max_seq_len=256, compute_dtype="float32",
                               attention_impl="xla"),
    "gpt3-tiny": ModelConfig(name="gpt3-tiny", family="gpt", vocab_size=256, hidden=64,
                             num_layers=4, num_heads=4, num_kv_heads=4, ffn_hidden=256,
                             max_seq_len=256, compute_dtype="float32", attention_impl="xla"),
}


def register_config(cfg: ModelConfig, replace: bool = False) -> ModelConfig:
    """Make `cfg` available by its name (get_config, the CLI's --model, profiles and
    plans that name it). Re-registering a name with a different config is an error
    unless `replace`."""
    if not isinstance(cfg, ModelConfig):
        raise ModelConfigError(f"register_config takes a ModelConfig, got {type(cfg).__name__}")
    old = CONFIGS.get(cfg.name)
    if old is not None and old != cfg and not replace:
        raise ModelConfigError(f"model {cfg.name!r} is already registered (pass replace=True to redefine it)")
    CONFIGS[cfg.name] = cfg
    return cfg


def get_config(name: str, **overrides) -> ModelConfig:
    """The registered config `name`, with fields replaced by `overrides` (validated)."""
    if name not in CONFIGS:
        raise ModelConfigError(
            f"unknown model {name!r}; valid models: {', '.join(CONFIGS)} (a model of your own is "
            "registered by its module: --model-module)")
    return _replace(CONFIGS[name], overrides) if overrides else CONFIGS[name]
