"""Building blocks shared by the Llama-2 and GPT-3 units (Flax NNX).

Shape suffixes name tensor axes: B batch, T sequence, D hidden, N query heads,
K kv heads, H head dim, F ffn hidden, V vocab.
Params are stored in `param_dtype`; math runs in `compute_dtype`, with norm
statistics and the loss in float32 (as mixed-precision training does).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx
from jax.ad_checkpoint import checkpoint_name

from models.config import ModelConfig


def dtype_of(name: str):
    return jnp.dtype(name)


def normal_init(std: float):
    return nnx.initializers.normal(stddev=std)


def dense(cfg: ModelConfig, d_in: int, d_out: int, rngs: nnx.Rngs, *, bias: bool,
          std: float = 0.02) -> nnx.Linear:
    return nnx.Linear(d_in, d_out, use_bias=bias, dtype=dtype_of(cfg.compute_dtype),
                      param_dtype=dtype_of(cfg.param_dtype), kernel_init=normal_init(std),
                      bias_init=nnx.initializers.zeros_init(), rngs=rngs)


class RMSNorm(nnx.Module):
    """Llama-2's RMSNorm: x / rms(x) * scale, statistics in float32."""

    def __init__(self, cfg: ModelConfig):
        self.eps = cfg.norm_eps
        self.out_dtype = dtype_of(cfg.compute_dtype)
        self.scale = nnx.Param(jnp.ones((cfg.hidden,), dtype_of(cfg.param_dtype)))

    def __call__(self, x_BxTxD):
        x32 = x_BxTxD.astype(jnp.float32)
        inv_rms = jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + self.eps)
        return (x32 * inv_rms * self.scale[...].astype(jnp.float32)).astype(self.out_dtype)


class LayerNorm(nnx.Module):
    """GPT's LayerNorm with scale and bias, statistics in float32."""

    def __init__(self, cfg: ModelConfig):
        self.eps = cfg.norm_eps
        self.out_dtype = dtype_of(cfg.compute_dtype)
        self.scale = nnx.Param(jnp.ones((cfg.hidden,), dtype_of(cfg.param_dtype)))
        self.bias = nnx.Param(jnp.zeros((cfg.hidden,), dtype_of(cfg.param_dtype)))

    def __call__(self, x_BxTxD):
        x32 = x_BxTxD.astype(jnp.float32)
        mean = jnp.mean(x32, axis=-1, keepdims=True)
        centered = x32 - mean
        var = jnp.mean(centered * centered, axis=-1, keepdims=True)
        y = centered * jax.lax.rsqrt(var + self.eps)
        y = y * self.scale[...].astype(jnp.float32) + self.bias[...].astype(jnp.float32)
        return y.astype(self.out_dtype)


def norm_for(cfg: ModelConfig) -> nnx.Module:
    return RMSNorm(cfg) if cfg.family == "llama" else LayerNorm(cfg)


def apply_rope(x_BxTxNxH, theta: float):
    """Rotary embedding on consecutive pairs (x[2i], x[2i+1]), as Meta's Llama code
    does; angles computed in float32 from positions 0..T-1."""
    _, T, _, H = x_BxTxNxH.shape
    inv_freq_H2 = 1.0 / (theta ** (jnp.arange(0, H, 2, dtype=jnp.float32) / H))
    angle_TxH2 = jnp.arange(T, dtype=jnp.float32)[:, None] * inv_freq_H2[None, :]
    cos_Tx1xH2 = jnp.cos(angle_TxH2)[:, None, :]
    sin_Tx1xH2 = jnp.sin(angle_TxH2)[:, None, :]
    x32 = x_BxTxNxH.astype(jnp.float32)
    even, odd = x32[..., 0::2], x32[..., 1::2]
    rot_even = even * cos_Tx1xH2 - odd * sin_Tx1xH2
    rot_odd = even * sin_Tx1xH2 + odd * cos_Tx1xH2
    return jnp.stack([rot_even, rot_odd], axis=-1).reshape(x_BxTxNxH.shape).astype(x_BxTxNxH.dtype)


def resolve_attention_impl(cfg: ModelConfig, dtype) -> str:
    """cfg.attention_impl, or for None: cuDNN flash attention on a GPU with 16-bit
    compute (what cuDNN supports), XLA otherwise."""
    if cfg.attention_impl is not None:
        return cfg.attention_impl
    on_gpu = jax.default_backend() == "gpu"
    sixteen_bit = jnp.dtype(dtype) in (jnp.dtype(jnp.bfloat16), jnp.dtype(jnp.float16))
    return "cudnn" if on_gpu and sixteen_bit and cfg.head_dim <= 128 and cfg.head_dim % 8 == 0 else "xla"


def causal_attention(cfg: ModelConfig, q_BxTxNxH, k_BxTxKxH, v_BxTxKxH):
    """Causal softmax attention through jax.nn.dot_product_attention (GQA when K < N)."""
    impl = resolve_attention_impl(cfg, q_BxTxNxH.dtype)
    return jax.nn.dot_product_attention(q_BxTxNxH, k_BxTxKxH, v_BxTxKxH, is_causal=True,
                                        implementation=impl)


def attention_output(cfg: ModelConfig, wo, x_BxTxD, q_BxTxNxH, k_BxTxKxH, v_BxTxKxH):
    """The part both families share after q, k, v: causal attention (attn_core), the
    output projection `wo` (attn_proj) and the residual add (attn_res)."""
    B, T, _ = x_BxTxD.shape
    a_BxTxNxH = causal_attention(cfg, q_BxTxNxH, k_BxTxKxH, v_BxTxKxH)
    a_BxTxD = checkpoint_name(a_BxTxNxH.reshape(B, T, -1), "attn_core")
    o_BxTxD = checkpoint_name(wo(a_BxTxD), "attn_proj")
    return checkpoint_name(x_BxTxD + o_BxTxD, "attn_res")


def cross_entropy_mean(logits_BxTxV, targets_BxT):
    """Mean token cross-entropy in float32."""
    logits32 = logits_BxTxV.astype(jnp.float32)
    logz_BxT = jax.nn.logsumexp(logits32, axis=-1)
    picked_BxT = jnp.take_along_axis(logits32, targets_BxT[..., None].astype(jnp.int32), axis=-1)[..., 0]
    return jnp.mean(logz_BxT - picked_BxT)


class Head(nnx.Module):
    """Final norm (the family's), output projection, mean cross-entropy. With tied
    embeddings the output projection is the embedding table, passed in by the caller."""

    def __init__(self, cfg: ModelConfig, rngs: nnx.Rngs):
        self.norm = norm_for(cfg)
        self.out_dtype = dtype_of(cfg.compute_dtype)
        if not cfg.tie_embeddings:
            self.w_out = dense(cfg, cfg.hidden, cfg.vocab_size, rngs, bias=False)

    def logits(self, x_BxTxD, tied_embedding_VxD=None):
        h_BxTxD = checkpoint_name(self.norm(x_BxTxD), "final_norm")
        if tied_embedding_VxD is None:
            logits_BxTxV = self.w_out(h_BxTxD)
        else:
            logits_BxTxV = h_BxTxD @ tied_embedding_VxD.astype(self.out_dtype).T
        return checkpoint_name(logits_BxTxV, "logits")

    def __call__(self, x_BxTxD, targets_BxT, tied_embedding_VxD=None):
        return cross_entropy_mean(self.logits(x_BxTxD, tied_embedding_VxD), targets_BxT)
