"""The built-in families, Llama-2 and GPT-3: their op vocabularies, presets and unit
modules, registered through models.registry like any user's family.

Every activation worth a save/recompute/offload decision is tagged with
`jax.ad_checkpoint.checkpoint_name(x, NAME)` using one of these names. Ops are
listed in forward order; unit kinds own disjoint op sets:
  embed: embed (token lookup; GPT adds learned positions)
  attn:  attn_norm .. attn_res        mlp: mlp_norm .. mlp_res
  head:  final_norm, logits
Notes on what each name tags (so profiles and plans mean the same thing):
  q, k, v      projections, [B,T,heads,head_dim]; q_rope/k_rope: after RoPE (llama)
  qkv          GPT's fused projection [B,T,3*D] (q/k/v are cheap slices of it)
  attn_core    attention output before the output projection, [B,T,D]; the
               softmax internals are never named, so they are always recomputed
               (flash-attention style) under every policy
  attn_proj    output projection; attn_res = x + attn_proj (the unit's output)
  mlp_act      SiLU(gate) for llama, GELU(up) for gpt; mlp_mul = act * up (llama)
Presets besides none/full: selective (Megatron-style: the attention core), mlp
(every mlp_ op), cmb (paper section 8: the cheap-to-recompute, memory-heavy norms,
activation and gating mul).
"""
from __future__ import annotations

from models.errors import ModelConfigError
from models.registry import register_family

LLAMA_KIND_OPS = {
    "embed": ("embed",),
    "attn": ("attn_norm", "q", "k", "v", "q_rope", "k_rope", "attn_core", "attn_proj", "attn_res"),
    "mlp": ("mlp_norm", "mlp_gate", "mlp_up", "mlp_act", "mlp_mul", "mlp_down", "mlp_res"),
    "head": ("final_norm", "logits"),
}
GPT_KIND_OPS = {
    "embed": ("embed",),
    "attn": ("attn_norm", "qkv", "attn_core", "attn_proj", "attn_res"),
    "mlp": ("mlp_norm", "mlp_up", "mlp_act", "mlp_down", "mlp_res"),
    "head": ("final_norm", "logits"),
}
LLAMA_OPS: tuple[str, ...] = tuple(o for ops in LLAMA_KIND_OPS.values() for o in ops)
GPT_OPS: tuple[str, ...] = tuple(o for ops in GPT_KIND_OPS.values() for o in ops)

_CMB = ("attn_norm", "mlp_norm", "final_norm", "mlp_act", "mlp_mul")


def _presets(ops: tuple[str, ...]) -> dict[str, tuple[str, ...]]:
    return {"selective": ("attn_core",),
            "mlp": tuple(o for o in ops if o.startswith("mlp_")),
            "cmb": tuple(o for o in _CMB if o in ops)}


def _check_llama(cfg) -> None:
    if cfg.head_dim % 2:
        raise ModelConfigError(f"model config {cfg.name!r}: RoPE needs an even head dim, got {cfg.head_dim}")


def _check_gpt(cfg) -> None:
    if cfg.num_kv_heads != cfg.num_heads:
        raise ModelConfigError(f"model config {cfg.name!r}: gpt uses a fused qkv projection: "
                               "num_kv_heads must equal num_heads")


# Megatron's layout: q, k, v, gate and up by output columns (attention thus by
# heads), attention out and MLP down by input rows, the head by vocabulary.
LLAMA_TENSOR = {"attn": {"wq/kernel": "column", "wk/kernel": "kv_column", "wv/kernel": "kv_column",
                         "wo/kernel": "row"},
                "mlp": {"w_gate/kernel": "column", "w_up/kernel": "column", "w_down/kernel": "row"},
                "head": {"w_out/kernel": "column"}}
# gpt's fused qkv is stored q|k|v: its columns cut in T blocks do not fall on
# head boundaries, so XLA regroups them by head (one reshuffle per layer).
GPT_TENSOR = {"attn": {"w_qkv/kernel": "column", "w_qkv/bias": "column", "wo/kernel": "row"},
              "mlp": {"w_up/kernel": "column", "w_up/bias": "column", "w_down/kernel": "row"},
              "head": {"w_out/kernel": "column"}}

register_family("llama", units={"embed": "models.llama:LlamaEmbed", "attn": "models.llama:LlamaAttention",
                                "mlp": "models.llama:LlamaMlp", "head": "models.layers:Head"},
                ops=LLAMA_KIND_OPS, presets=_presets(LLAMA_OPS), check=_check_llama,
                tensor_parallel=LLAMA_TENSOR)
register_family("gpt", units={"embed": "models.gpt:GptEmbed", "attn": "models.gpt:GptAttention",
                              "mlp": "models.gpt:GptMlp", "head": "models.layers:Head"},
                ops=GPT_KIND_OPS, presets=_presets(GPT_OPS), check=_check_gpt,
                tensor_parallel=GPT_TENSOR)
