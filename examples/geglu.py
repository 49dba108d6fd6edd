"""A model of your own: a Gemma-like decoder with a GeGLU MLP, registered with Obscura.

Import this module (or pass it to the CLI as `--model-module examples/geglu.py`) and
the family "geglu" and the config "geglu-tiny" exist: policies, `model-info`, the
profiler, the planner and the engine then work on it by its own op names, none of
which is a Llama or GPT name. Run it directly to check that every registered op is
really tagged in the traced model:

    python examples/geglu.py

What a family provides (models.registry): four Flax NNX unit modules built as
`cls(cfg, rngs)` (embed: tokens [B,T] -> [B,T,D]; attn, mlp: [B,T,D] -> [B,T,D];
head: (x, targets, tied_table) -> mean loss, plus .logits(x, tied_table)), the op
names each kind tags with `checkpoint_name`, in forward order, and named presets.
"""
from __future__ import annotations

import math
import sys

import jax
import jax.numpy as jnp
from flax import nnx
from jax.ad_checkpoint import checkpoint_name

import models
from models.layers import RMSNorm, apply_rope, causal_attention, cross_entropy_mean, dense, normal_init

OPS = {
    "embed": ("tok_embed",),
    "attn": ("pre_attn_norm", "query", "key", "value", "rot_query", "rot_key", "sdpa", "attn_out",
             "attn_add"),
    "mlp": ("pre_ffn_norm", "ffn_gate", "ffn_up", "ffn_gelu", "ffn_glu", "ffn_down", "ffn_add"),
    "head": ("out_norm", "out_logits"),
}
PRESETS = {"selective": ("sdpa",),
           "cmb": ("pre_attn_norm", "pre_ffn_norm", "out_norm", "ffn_gelu", "ffn_glu"),
           "ffn": ("ffn_gate", "ffn_up", "ffn_gelu", "ffn_glu")}


class GegluEmbed(nnx.Module):
    """Token lookup scaled by sqrt(D), as Gemma does."""

    def __init__(self, cfg, rngs: nnx.Rngs):
        self.scale = math.sqrt(cfg.hidden)
        self.out_dtype = jnp.dtype(cfg.compute_dtype)
        self.tokens = nnx.Embed(cfg.vocab_size, cfg.hidden, param_dtype=jnp.dtype(cfg.param_dtype),
                                embedding_init=normal_init(0.02), rngs=rngs)

    def __call__(self, tokens_BxT):
        x_BxTxD = jnp.take(self.tokens.embedding[...], tokens_BxT, axis=0) * self.scale
        return checkpoint_name(x_BxTxD.astype(self.out_dtype), "tok_embed")


class GegluAttention(nnx.Module):
    def __init__(self, cfg, rngs: nnx.Rngs):
        self.cfg = cfg
        D, N, K, H = cfg.hidden, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        self.norm = RMSNorm(cfg)
        self.wq = dense(cfg, D, N * H, rngs, bias=False)
        self.wk = dense(cfg, D, K * H, rngs, bias=False)
        self.wv = dense(cfg, D, K * H, rngs, bias=False)
        self.wo = dense(cfg, N * H, D, rngs, bias=False)

    def __call__(self, x_BxTxD):
        cfg = self.cfg
        B, T, _ = x_BxTxD.shape
        N, K, H = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        h_BxTxD = checkpoint_name(self.norm(x_BxTxD), "pre_attn_norm")
        q_BxTxNxH = checkpoint_name(self.wq(h_BxTxD).reshape(B, T, N, H), "query")
        k_BxTxKxH = checkpoint_name(self.wk(h_BxTxD).reshape(B, T, K, H), "key")
        v_BxTxKxH = checkpoint_name(self.wv(h_BxTxD).reshape(B, T, K, H), "value")
        q_BxTxNxH = checkpoint_name(apply_rope(q_BxTxNxH, cfg.rope_theta), "rot_query")
        k_BxTxKxH = checkpoint_name(apply_rope(k_BxTxKxH, cfg.rope_theta), "rot_key")
        a_BxTxD = checkpoint_name(causal_attention(cfg, q_BxTxNxH, k_BxTxKxH, v_BxTxKxH).reshape(B, T, -1),
                                  "sdpa")
        o_BxTxD = checkpoint_name(self.wo(a_BxTxD), "attn_out")
        return checkpoint_name(x_BxTxD + o_BxTxD, "attn_add")


class GegluMlp(nnx.Module):
    """GeGLU: down(gelu(gate(x)) * up(x))."""

    def __init__(self, cfg, rngs: nnx.Rngs):
        D, F = cfg.hidden, cfg.ffn_hidden
        self.norm = RMSNorm(cfg)
        self.w_gate = dense(cfg, D, F, rngs, bias=False)
        self.w_up = dense(cfg, D, F, rngs, bias=False)
        self.w_down = dense(cfg, F, D, rngs, bias=False)

    def __call__(self, x_BxTxD):
        h_BxTxD = checkpoint_name(self.norm(x_BxTxD), "pre_ffn_norm")
        gate_BxTxF = checkpoint_name(self.w_gate(h_BxTxD), "ffn_gate")
        up_BxTxF = checkpoint_name(self.w_up(h_BxTxD), "ffn_up")
        act_BxTxF = checkpoint_name(jax.nn.gelu(gate_BxTxF, approximate=True), "ffn_gelu")
        glu_BxTxF = checkpoint_name(act_BxTxF * up_BxTxF, "ffn_glu")
        down_BxTxD = checkpoint_name(self.w_down(glu_BxTxF), "ffn_down")
        return checkpoint_name(x_BxTxD + down_BxTxD, "ffn_add")


class GegluHead(nnx.Module):
    def __init__(self, cfg, rngs: nnx.Rngs):
        self.norm = RMSNorm(cfg)
        self.w_out = dense(cfg, cfg.hidden, cfg.vocab_size, rngs, bias=False)

    def logits(self, x_BxTxD, tied_embedding_VxD=None):
        h_BxTxD = checkpoint_name(self.norm(x_BxTxD), "out_norm")
        return checkpoint_name(self.w_out(h_BxTxD), "out_logits")

    def __call__(self, x_BxTxD, targets_BxT, tied_embedding_VxD=None):
        return cross_entropy_mean(self.logits(x_BxTxD), targets_BxT)


def _check(cfg) -> None:
    if cfg.head_dim % 2:
        raise models.ModelConfigError(f"model config {cfg.name!r}: RoPE needs an even head dim")
    if cfg.tie_embeddings:
        raise models.ModelConfigError(f"model config {cfg.name!r}: geglu keeps its embeddings untied")


models.register_family("geglu", units={"embed": GegluEmbed, "attn": GegluAttention, "mlp": GegluMlp,
                                       "head": GegluHead},
                       ops=OPS, presets=PRESETS, check=_check,
                       # how it shards under --tensor-parallel T (Megatron: q/k/v/gate/up by
                       # columns, out/down by rows, the head by vocabulary; the rest replicated)
                       tensor_parallel={"attn": {"wq/kernel": "column", "wk/kernel": "kv_column",
                                                 "wv/kernel": "kv_column", "wo/kernel": "row"},
                                        "mlp": {"w_gate/kernel": "column", "w_up/kernel": "column",
                                                "w_down/kernel": "row"},
                                        "head": {"w_out/kernel": "column"}})
models.register_config(models.ModelConfig(
    name="geglu-tiny", family="geglu", vocab_size=256, hidden=64, num_layers=4, num_heads=4,
    num_kv_heads=2, ffn_hidden=128, max_seq_len=256, compute_dtype="float32", attention_impl="xla"))


def main() -> int:
    """Trace the whole model once and check every registered op name is tagged."""
    cfg = models.get_config("geglu-tiny")
    jaxpr = str(jax.make_jaxpr(lambda p, t: models.model_loss(cfg, p, t, t))(
        models.abstract_params(cfg), jax.ShapeDtypeStruct((1, 8), jnp.int32)))
    missing = [op for op in models.ops_for("geglu") if f"name={op}]" not in jaxpr and f"name={op} " not in jaxpr]
    clash = sorted(set(models.ops_for("geglu")) & (set(models.LLAMA_OPS) | set(models.GPT_OPS)))
    print(f"geglu-tiny: {models.count_params(cfg):,} params, {cfg.num_units} units, "
          f"{len(models.ops_for('geglu'))} ops: {', '.join(models.ops_for('geglu'))}")
    if missing or clash:
        print(f"FAILED: ops not tagged {missing}, ops shared with llama/gpt {clash}")
        return 1
    print("every op is tagged in the traced model; none is a llama or gpt name")
    return 0


if __name__ == "__main__":
    sys.exit(main())
