"""A mixture-of-experts model whose MLP adds an auxiliary (load-balancing) loss.

Import it (or pass `--model-module examples/moe.py`) and the family "moe" and the
config "moe-tiny" exist. Its MLP unit routes each token to one of E experts (top-1)
and returns `(y, aux)`: besides its output, a scalar auxiliary loss that training
adds to the loss (models.aux_loss: each micro-batch's aux joins the mean loss at
1/m, whichever stage it is computed on). The aux here is the sequence-wise load
balance, E * sum_e f_e * P_e per sequence (f_e: the share of the sequence's tokens
routed to expert e, P_e: their mean router probability for e), averaged over the
micro-batch's sequences: a mean over rows, so micro-batching does not change it.

Run it to train it through the pipeline against the unpipelined model (what
`obscura train --check` does) under 1F1B, Obscura and ZB-H1 on 4 emulated devices:

    python examples/moe.py
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
from flax import nnx
from jax.ad_checkpoint import checkpoint_name

import models
from models.layers import RMSNorm, causal_attention, cross_entropy_mean, dense, normal_init

NUM_EXPERTS = 4
AUX_COEF = 0.1
OPS = {"embed": ("moe_tok",),
       "attn": ("moe_attn_norm", "moe_q", "moe_k", "moe_v", "moe_attn_core", "moe_attn_out", "moe_attn_add"),
       "mlp": ("moe_norm", "router_logits", "router_probs", "expert_up", "expert_act", "expert_down",
               "moe_combine", "moe_add"),
       "head": ("moe_final_norm", "moe_logits")}
PRESETS = {"cmb": ("moe_attn_norm", "moe_norm", "moe_final_norm", "expert_act"),
           "experts": ("expert_up", "expert_act")}


class MoeEmbed(nnx.Module):
    def __init__(self, cfg, rngs: nnx.Rngs):
        self.out_dtype = jnp.dtype(cfg.compute_dtype)
        self.tokens = nnx.Embed(cfg.vocab_size, cfg.hidden, param_dtype=jnp.dtype(cfg.param_dtype),
                                embedding_init=normal_init(0.02), rngs=rngs)

    def __call__(self, tokens_BxT):
        return checkpoint_name(jnp.take(self.tokens.embedding[...], tokens_BxT, axis=0).astype(self.out_dtype),
                               "moe_tok")


class MoeAttention(nnx.Module):
    def __init__(self, cfg, rngs: nnx.Rngs):
        self.cfg = cfg
        D, N, H = cfg.hidden, cfg.num_heads, cfg.head_dim
        self.norm = RMSNorm(cfg)
        self.wq, self.wk, self.wv = (dense(cfg, D, N * H, rngs, bias=False) for _ in range(3))
        self.wo = dense(cfg, N * H, D, rngs, bias=False)

    def __call__(self, x_BxTxD):
        B, T, _ = x_BxTxD.shape
        N, H = self.cfg.num_heads, self.cfg.head_dim
        h_BxTxD = checkpoint_name(self.norm(x_BxTxD), "moe_attn_norm")
        q, k, v = (checkpoint_name(w(h_BxTxD).reshape(B, T, N, H), name)
                   for w, name in ((self.wq, "moe_q"), (self.wk, "moe_k"), (self.wv, "moe_v")))
        a_BxTxD = checkpoint_name(causal_attention(self.cfg, q, k, v).reshape(B, T, -1), "moe_attn_core")
        return checkpoint_name(x_BxTxD + checkpoint_name(self.wo(a_BxTxD), "moe_attn_out"), "moe_attn_add")


class MoeMlp(nnx.Module):
    """Top-1 routing over NUM_EXPERTS GELU experts; returns (y, aux load-balancing loss)."""

    def __init__(self, cfg, rngs: nnx.Rngs):
        D, F, E = cfg.hidden, cfg.ffn_hidden, NUM_EXPERTS
        pdt = jnp.dtype(cfg.param_dtype)
        self.norm = RMSNorm(cfg)
        self.router = dense(cfg, D, E, rngs, bias=False)
        self.w_up = nnx.Param(normal_init(0.02)(rngs.params(), (E, D, F), pdt))
        self.w_down = nnx.Param(normal_init(0.02)(rngs.params(), (E, F, D), pdt))

    def __call__(self, x_BxTxD):
        E = NUM_EXPERTS
        h_BxTxD = checkpoint_name(self.norm(x_BxTxD), "moe_norm")
        logits_BxTxE = checkpoint_name(self.router(h_BxTxD).astype(jnp.float32), "router_logits")
        probs_BxTxE = checkpoint_name(jax.nn.softmax(logits_BxTxE, axis=-1), "router_probs")
        chosen_BxTxE = jax.nn.one_hot(jnp.argmax(probs_BxTxE, axis=-1), E, dtype=jnp.float32)
        up_BxTxExF = checkpoint_name(jnp.einsum("btd,edf->btef", h_BxTxD, self.w_up[...]), "expert_up")
        act_BxTxExF = checkpoint_name(jax.nn.gelu(up_BxTxExF, approximate=True), "expert_act")
        down_BxTxExD = checkpoint_name(jnp.einsum("btef,efd->bted", act_BxTxExF, self.w_down[...]), "expert_down")
        gate_BxTxE = (probs_BxTxE * chosen_BxTxE).astype(x_BxTxD.dtype)
        y_BxTxD = checkpoint_name(jnp.einsum("bte,bted->btd", gate_BxTxE, down_BxTxExD), "moe_combine")
        # sequence-wise load balance, then the mean over the micro-batch's rows
        f_BxE = jax.lax.stop_gradient(chosen_BxTxE.mean(axis=1))
        aux_B = E * jnp.sum(f_BxE * probs_BxTxE.mean(axis=1), axis=-1)
        return checkpoint_name(x_BxTxD + y_BxTxD, "moe_add"), AUX_COEF * aux_B.mean()


class MoeHead(nnx.Module):
    def __init__(self, cfg, rngs: nnx.Rngs):
        self.norm = RMSNorm(cfg)
        self.w_out = dense(cfg, cfg.hidden, cfg.vocab_size, rngs, bias=False)

    def logits(self, x_BxTxD, tied_embedding_VxD=None):
        return checkpoint_name(self.w_out(checkpoint_name(self.norm(x_BxTxD), "moe_final_norm")), "moe_logits")

    def __call__(self, x_BxTxD, targets_BxT, tied_embedding_VxD=None):
        return cross_entropy_mean(self.logits(x_BxTxD), targets_BxT)


models.register_family("moe", units={"embed": MoeEmbed, "attn": MoeAttention, "mlp": MoeMlp, "head": MoeHead},
                       ops=OPS, presets=PRESETS)
models.register_config(models.ModelConfig(
    name="moe-tiny", family="moe", vocab_size=128, hidden=32, num_layers=2, num_heads=2, num_kv_heads=2,
    ffn_hidden=64, max_seq_len=64, compute_dtype="float32", attention_impl="xla"))


def check_with_the_cli(module: str, model: str, schedules=("1f1b", "obscura", "zb-h1")) -> int:
    """`obscura train --check` of `model` (registered by `module`) under each schedule
    on 4 emulated devices; the exit code of the first that differs (0: all equal)."""
    for name in schedules:
        extra = ["--adjusted", "1", "--adjusted-policy", "cmb"] if name == "obscura" else []
        r = subprocess.run([sys.executable, "-m", "obscura_jax", "train", "--model", model, "--model-module", module,
                            "--schedule", name, *extra, "--stages", "4", "--microbatches", "4",
                            "--micro-batch-size", "2", "--seq-len", "16", "--steps", "2", "--devices", "cpu:4",
                            "--cost-reps", "1", "--no-progress", "--check"], capture_output=True, text=True)
        line = next((ln for ln in r.stdout.splitlines() if ln.startswith("check vs unpipelined")), r.stderr.strip())
        print(f"{model} {name}: {line}")
        if r.returncode != 0:
            return r.returncode
    return 0


if __name__ == "__main__":
    sys.exit(check_with_the_cli(str(Path(__file__).resolve()), "moe-tiny"))
