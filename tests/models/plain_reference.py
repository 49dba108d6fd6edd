"""Independent plain-jnp Llama-2 and GPT-3 forwards for the tests: no Flax, no
checkpoint names, written from the papers' equations (RoPE via complex numbers,
attention via an explicit masked softmax, GQA by repeating kv heads, GELU by its
tanh formula). Reads the models package's param dict layout only."""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np


def _rms_norm(x, scale, eps):
    return x / jnp.sqrt(jnp.mean(x ** 2, axis=-1, keepdims=True) + eps) * scale


def _layer_norm(x, scale, bias, eps):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / jnp.sqrt(var + eps) * scale + bias


def _rope_complex(x, theta):
    # x: [B, T, heads, Hd]; pairs (2i, 2i+1) are one complex number rotated by pos*freq_i
    T, Hd = x.shape[1], x.shape[-1]
    freqs = theta ** (-jnp.arange(0, Hd // 2, dtype=jnp.float32) * 2.0 / Hd)
    rot = jnp.exp(1j * jnp.outer(jnp.arange(T), freqs))[None, :, None, :]
    xc = jax.lax.complex(x[..., 0::2], x[..., 1::2]) * rot
    return jnp.stack([jnp.real(xc), jnp.imag(xc)], axis=-1).reshape(x.shape)


def _attention(q, k, v):
    # q: [B,T,N,Hd], k/v: [B,T,K,Hd] with N a multiple of K
    groups = q.shape[2] // k.shape[2]
    k = jnp.repeat(k, groups, axis=2)
    v = jnp.repeat(v, groups, axis=2)
    scores = jnp.einsum("btnh,bsnh->bnts", q, k) / math.sqrt(q.shape[-1])
    T = q.shape[1]
    causal = jnp.tril(jnp.ones((T, T), bool))
    scores = jnp.where(causal[None, None], scores, -jnp.inf)
    probs = jnp.exp(scores - scores.max(-1, keepdims=True))
    probs = probs / probs.sum(-1, keepdims=True)
    return jnp.einsum("bnts,bsnh->btnh", probs, v)


def _gelu_tanh(x):
    return 0.5 * x * (1 + jnp.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


def llama_logits(cfg, params, tokens):
    B, T = tokens.shape
    N, K, Hd = cfg.num_heads, cfg.num_kv_heads, cfg.hidden // cfg.num_heads
    x = params["embed"]["tokens"]["embedding"][tokens]
    for i in range(cfg.num_layers):
        a = params[f"attn_{i}"]
        h = _rms_norm(x, a["norm"]["scale"], cfg.norm_eps)
        q = _rope_complex((h @ a["wq"]["kernel"]).reshape(B, T, N, Hd), cfg.rope_theta)
        k = _rope_complex((h @ a["wk"]["kernel"]).reshape(B, T, K, Hd), cfg.rope_theta)
        v = (h @ a["wv"]["kernel"]).reshape(B, T, K, Hd)
        x = x + _attention(q, k, v).reshape(B, T, N * Hd) @ a["wo"]["kernel"]
        m = params[f"mlp_{i}"]
        h = _rms_norm(x, m["norm"]["scale"], cfg.norm_eps)
        gate = h @ m["w_gate"]["kernel"]
        x = x + (gate * jax.nn.sigmoid(gate) * (h @ m["w_up"]["kernel"])) @ m["w_down"]["kernel"]
    head = params["head"]
    return _rms_norm(x, head["norm"]["scale"], cfg.norm_eps) @ head["w_out"]["kernel"]


def gpt_logits(cfg, params, tokens):
    B, T = tokens.shape
    N, Hd = cfg.num_heads, cfg.hidden // cfg.num_heads
    emb = params["embed"]
    x = emb["tokens"]["embedding"][tokens] + emb["positions"]["embedding"][jnp.arange(T)][None]
    for i in range(cfg.num_layers):
        a = params[f"attn_{i}"]
        h = _layer_norm(x, a["norm"]["scale"], a["norm"]["bias"], cfg.norm_eps)
        qkv = h @ a["w_qkv"]["kernel"] + a["w_qkv"]["bias"]
        q, k, v = (qkv[..., j * cfg.hidden:(j + 1) * cfg.hidden].reshape(B, T, N, Hd)
                   for j in range(3))
        x = x + _attention(q, k, v).reshape(B, T, cfg.hidden) @ a["wo"]["kernel"] + a["wo"]["bias"]
        m = params[f"mlp_{i}"]
        h = _layer_norm(x, m["norm"]["scale"], m["norm"]["bias"], cfg.norm_eps)
        up = _gelu_tanh(h @ m["w_up"]["kernel"] + m["w_up"]["bias"])
        x = x + up @ m["w_down"]["kernel"] + m["w_down"]["bias"]
    head = params["head"]
    h = _layer_norm(x, head["norm"]["scale"], head["norm"]["bias"], cfg.norm_eps)
    return h @ head["w_out"]["kernel"]


def plain_logits(cfg, params, tokens):
    return (llama_logits if cfg.family == "llama" else gpt_logits)(cfg, params, tokens)


def plain_loss(cfg, params, tokens, targets):
    logits = plain_logits(cfg, params, tokens)
    logp = logits - jax.scipy.special.logsumexp(logits, axis=-1, keepdims=True)
    return -jnp.mean(jnp.take_along_axis(logp, targets[..., None], axis=-1))


def perturbed_params(params, seed=7, scale=0.05):
    """Add noise to every leaf so norm scales and biases are not trivially 1 / 0
    (numpy noise: a jitted jax.random version costs seconds of compile)."""
    rng = np.random.default_rng(seed)
    return jax.tree.map(
        lambda leaf: leaf + jnp.asarray(scale * rng.standard_normal(leaf.shape), leaf.dtype), params)
