"""A parallel-block model (GPT-NeoX / Falcon): attention and MLP read the same input
and their outputs are summed, y = x + attn(ln_a(x)) + mlp(ln_m(x)).

Such a layer cannot be cut into an attention unit followed by an MLP unit (the MLP
needs the layer's input, not the attention's output), so the family registers the
unit kind `block` instead of `attn` and `mlp`: its model is L+2 partition units
(embed, block_0, ..., block_{L-1}, head), and profile, plan, train and `--check`
work on those. Import it (or pass `--model-module examples/parallel_block.py`) and
the family "parallel" and the config "parallel-tiny" exist. Run it to train it
through the pipeline against the unpipelined model under 1F1B, Obscura and ZB-H1 on
4 emulated devices:

    python examples/parallel_block.py
"""
from __future__ import annotations

import sys
from pathlib import Path

import jax
import jax.numpy as jnp
from flax import nnx
from jax.ad_checkpoint import checkpoint_name

import models
from models.layers import LayerNorm, causal_attention, cross_entropy_mean, dense, normal_init

OPS = {"embed": ("pb_tok",),
       "block": ("pb_ln_attn", "pb_ln_mlp", "pb_q", "pb_k", "pb_v", "pb_attn_core", "pb_attn_out",
                 "pb_mlp_up", "pb_mlp_act", "pb_mlp_down", "pb_sum"),
       "head": ("pb_final_norm", "pb_logits")}
PRESETS = {"selective": ("pb_attn_core",), "cmb": ("pb_ln_attn", "pb_ln_mlp", "pb_final_norm", "pb_mlp_act")}


class ParallelEmbed(nnx.Module):
    def __init__(self, cfg, rngs: nnx.Rngs):
        self.out_dtype = jnp.dtype(cfg.compute_dtype)
        self.tokens = nnx.Embed(cfg.vocab_size, cfg.hidden, param_dtype=jnp.dtype(cfg.param_dtype),
                                embedding_init=normal_init(0.02), rngs=rngs)

    def __call__(self, tokens_BxT):
        return checkpoint_name(jnp.take(self.tokens.embedding[...], tokens_BxT, axis=0).astype(self.out_dtype),
                               "pb_tok")


class ParallelBlock(nnx.Module):
    """GPT-NeoX's layer: two LayerNorms of the same input, attention and MLP beside each other."""

    def __init__(self, cfg, rngs: nnx.Rngs):
        self.cfg = cfg
        D, N, H, F = cfg.hidden, cfg.num_heads, cfg.head_dim, cfg.ffn_hidden
        self.ln_attn, self.ln_mlp = LayerNorm(cfg), LayerNorm(cfg)
        self.wq, self.wk, self.wv = (dense(cfg, D, N * H, rngs, bias=True) for _ in range(3))
        self.wo = dense(cfg, N * H, D, rngs, bias=True)
        self.w_up = dense(cfg, D, F, rngs, bias=True)
        self.w_down = dense(cfg, F, D, rngs, bias=True)

    def __call__(self, x_BxTxD):
        B, T, _ = x_BxTxD.shape
        N, H = self.cfg.num_heads, self.cfg.head_dim
        a_BxTxD = checkpoint_name(self.ln_attn(x_BxTxD), "pb_ln_attn")
        m_BxTxD = checkpoint_name(self.ln_mlp(x_BxTxD), "pb_ln_mlp")
        q, k, v = (checkpoint_name(w(a_BxTxD).reshape(B, T, N, H), name)
                   for w, name in ((self.wq, "pb_q"), (self.wk, "pb_k"), (self.wv, "pb_v")))
        core_BxTxD = checkpoint_name(causal_attention(self.cfg, q, k, v).reshape(B, T, -1), "pb_attn_core")
        attn_BxTxD = checkpoint_name(self.wo(core_BxTxD), "pb_attn_out")
        up_BxTxF = checkpoint_name(self.w_up(m_BxTxD), "pb_mlp_up")
        act_BxTxF = checkpoint_name(jax.nn.gelu(up_BxTxF, approximate=True), "pb_mlp_act")
        mlp_BxTxD = checkpoint_name(self.w_down(act_BxTxF), "pb_mlp_down")
        return checkpoint_name(x_BxTxD + attn_BxTxD + mlp_BxTxD, "pb_sum")


class ParallelHead(nnx.Module):
    def __init__(self, cfg, rngs: nnx.Rngs):
        self.norm = LayerNorm(cfg)
        self.w_out = dense(cfg, cfg.hidden, cfg.vocab_size, rngs, bias=False)

    def logits(self, x_BxTxD, tied_embedding_VxD=None):
        return checkpoint_name(self.w_out(checkpoint_name(self.norm(x_BxTxD), "pb_final_norm")), "pb_logits")

    def __call__(self, x_BxTxD, targets_BxT, tied_embedding_VxD=None):
        return cross_entropy_mean(self.logits(x_BxTxD), targets_BxT)


models.register_family("parallel", units={"embed": ParallelEmbed, "block": ParallelBlock, "head": ParallelHead},
                       ops=OPS, presets=PRESETS)
models.register_config(models.ModelConfig(
    name="parallel-tiny", family="parallel", vocab_size=128, hidden=32, num_layers=4, num_heads=2,
    num_kv_heads=2, ffn_hidden=128, max_seq_len=64, compute_dtype="float32", attention_impl="xla"))


if __name__ == "__main__":
    from moe import check_with_the_cli   # (beside this file) the same three `train --check` runs
    sys.exit(check_with_the_cli(str(Path(__file__).resolve()), "parallel-tiny"))
