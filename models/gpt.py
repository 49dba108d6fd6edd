"""GPT-3 partition units (Flax NNX): token + learned position embedding, attention
block (LayerNorm, fused qkv with bias), GELU MLP block; the head (LayerNorm,
output projection, loss) is models.layers.Head. Op names from models.ops.GPT_OPS.
Output projections of each block start with std 0.02/sqrt(2L) (GPT-2/Megatron
residual scaling)."""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from flax import nnx
from jax.ad_checkpoint import checkpoint_name

from models.config import ModelConfig, ModelConfigError
from models.layers import LayerNorm, attention_output, dense, dtype_of, normal_init


def _residual_std(cfg: ModelConfig) -> float:
    return 0.02 / math.sqrt(2 * cfg.num_layers)


class GptEmbed(nnx.Module):
    def __init__(self, cfg: ModelConfig, rngs: nnx.Rngs):
        self.max_seq_len = cfg.max_seq_len
        self.out_dtype = dtype_of(cfg.compute_dtype)
        pdt = dtype_of(cfg.param_dtype)
        self.tokens = nnx.Embed(cfg.vocab_size, cfg.hidden, param_dtype=pdt,
                                embedding_init=normal_init(0.02), rngs=rngs)
        self.positions = nnx.Embed(cfg.max_seq_len, cfg.hidden, param_dtype=pdt,
                                   embedding_init=normal_init(0.01), rngs=rngs)

    def __call__(self, tokens_BxT):
        T = tokens_BxT.shape[1]
        if T > self.max_seq_len:
            raise ModelConfigError(
                f"sequence length {T} exceeds the learned position table ({self.max_seq_len})")
        tok_BxTxD = jnp.take(self.tokens.embedding[...], tokens_BxT, axis=0)
        pos_TxD = self.positions.embedding[...][:T]
        return checkpoint_name((tok_BxTxD + pos_TxD[None]).astype(self.out_dtype), "embed")


class GptAttention(nnx.Module):
    def __init__(self, cfg: ModelConfig, rngs: nnx.Rngs):
        self.cfg = cfg
        D = cfg.hidden
        self.norm = LayerNorm(cfg)
        self.w_qkv = dense(cfg, D, 3 * D, rngs, bias=True)
        self.wo = dense(cfg, D, D, rngs, bias=True, std=_residual_std(cfg))

    def __call__(self, x_BxTxD):
        cfg = self.cfg
        B, T, D = x_BxTxD.shape
        N, H = cfg.num_heads, cfg.head_dim
        h_BxTxD = checkpoint_name(self.norm(x_BxTxD), "attn_norm")
        qkv_BxTx3D = checkpoint_name(self.w_qkv(h_BxTxD), "qkv")
        qkv_BxTx3xNxH = qkv_BxTx3D.reshape(B, T, 3, N, H)
        q_BxTxNxH, k_BxTxNxH, v_BxTxNxH = (qkv_BxTx3xNxH[:, :, i] for i in range(3))
        return attention_output(cfg, self.wo, x_BxTxD, q_BxTxNxH, k_BxTxNxH, v_BxTxNxH)


class GptMlp(nnx.Module):
    def __init__(self, cfg: ModelConfig, rngs: nnx.Rngs):
        D, F = cfg.hidden, cfg.ffn_hidden
        self.norm = LayerNorm(cfg)
        self.w_up = dense(cfg, D, F, rngs, bias=True)
        self.w_down = dense(cfg, F, D, rngs, bias=True, std=_residual_std(cfg))

    def __call__(self, x_BxTxD):
        h_BxTxD = checkpoint_name(self.norm(x_BxTxD), "mlp_norm")
        up_BxTxF = checkpoint_name(self.w_up(h_BxTxD), "mlp_up")
        act_BxTxF = checkpoint_name(jax.nn.gelu(up_BxTxF, approximate=True), "mlp_act")
        down_BxTxD = checkpoint_name(self.w_down(act_BxTxF), "mlp_down")
        return checkpoint_name(x_BxTxD + down_BxTxD, "mlp_res")
