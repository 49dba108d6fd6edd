"""Llama-2 partition units (Flax NNX): token embedding, attention block (RMSNorm,
RoPE, optional grouped-query attention), SwiGLU MLP block; the head (RMSNorm,
output projection, loss) is models.layers.Head. Every decision-worthy activation
is named with `checkpoint_name` from models.ops.LLAMA_OPS."""
from __future__ import annotations

import jax.numpy as jnp
from flax import nnx
from jax.ad_checkpoint import checkpoint_name

from models.config import ModelConfig, ModelConfigError
from models.layers import RMSNorm, apply_rope, attention_output, dense, dtype_of, normal_init


class LlamaEmbed(nnx.Module):
    def __init__(self, cfg: ModelConfig, rngs: nnx.Rngs):
        self.max_seq_len = cfg.max_seq_len
        self.out_dtype = dtype_of(cfg.compute_dtype)
        self.tokens = nnx.Embed(cfg.vocab_size, cfg.hidden, param_dtype=dtype_of(cfg.param_dtype),
                                embedding_init=normal_init(0.02), rngs=rngs)

    def __call__(self, tokens_BxT):
        if tokens_BxT.shape[1] > self.max_seq_len:
            raise ModelConfigError(
                f"sequence length {tokens_BxT.shape[1]} exceeds max_seq_len {self.max_seq_len}")
        x_BxTxD = jnp.take(self.tokens.embedding[...], tokens_BxT, axis=0)
        return checkpoint_name(x_BxTxD.astype(self.out_dtype), "embed")


class LlamaAttention(nnx.Module):
    def __init__(self, cfg: ModelConfig, rngs: nnx.Rngs):
        self.cfg = cfg
        D, N, K, H = cfg.hidden, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        self.norm = RMSNorm(cfg)
        self.wq = dense(cfg, D, N * H, rngs, bias=False)
        self.wk = dense(cfg, D, K * H, rngs, bias=False)
        self.wv = dense(cfg, D, K * H, rngs, bias=False)
        self.wo = dense(cfg, N * H, D, rngs, bias=False)

    def __call__(self, x_BxTxD):
        cfg = self.cfg
        B, T, D = x_BxTxD.shape
        N, K, H = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        h_BxTxD = checkpoint_name(self.norm(x_BxTxD), "attn_norm")
        q_BxTxNxH = checkpoint_name(self.wq(h_BxTxD).reshape(B, T, N, H), "q")
        k_BxTxKxH = checkpoint_name(self.wk(h_BxTxD).reshape(B, T, K, H), "k")
        v_BxTxKxH = checkpoint_name(self.wv(h_BxTxD).reshape(B, T, K, H), "v")
        q_BxTxNxH = checkpoint_name(apply_rope(q_BxTxNxH, cfg.rope_theta), "q_rope")
        k_BxTxKxH = checkpoint_name(apply_rope(k_BxTxKxH, cfg.rope_theta), "k_rope")
        return attention_output(cfg, self.wo, x_BxTxD, q_BxTxNxH, k_BxTxKxH, v_BxTxKxH)


class LlamaMlp(nnx.Module):
    def __init__(self, cfg: ModelConfig, rngs: nnx.Rngs):
        D, F = cfg.hidden, cfg.ffn_hidden
        self.norm = RMSNorm(cfg)
        self.w_gate = dense(cfg, D, F, rngs, bias=False)
        self.w_up = dense(cfg, D, F, rngs, bias=False)
        self.w_down = dense(cfg, F, D, rngs, bias=False)

    def __call__(self, x_BxTxD):
        h_BxTxD = checkpoint_name(self.norm(x_BxTxD), "mlp_norm")
        gate_BxTxF = checkpoint_name(self.w_gate(h_BxTxD), "mlp_gate")
        up_BxTxF = checkpoint_name(self.w_up(h_BxTxD), "mlp_up")
        act_BxTxF = checkpoint_name(nnx.silu(gate_BxTxF), "mlp_act")
        mul_BxTxF = checkpoint_name(act_BxTxF * up_BxTxF, "mlp_mul")
        down_BxTxD = checkpoint_name(self.w_down(mul_BxTxF), "mlp_down")
        return checkpoint_name(x_BxTxD + down_BxTxD, "mlp_res")
