"""Yardstick for layer-granular recompute, written apart from the engine and the
profiler: `num_layers` transformer layers as plain JAX, forward and backward as two
separately jitted programs (as the engine runs them), in two variants:

    saved  each unit (attn, mlp) under jax.checkpoint(save_only_these_names(every op)):
           the backward reuses every named op (the profile's `none`)
    layer  each layer (attn then mlp) under ONE jax.checkpoint(nothing_saveable):
           the backward reruns the layer from its input (DAPPLE+ as the paper runs it)

    fwd program:  (params, x)        -> (y, pullback)     residuals live in pullback
    bwd program:  (pullback, dy, g)  -> g + dparams       g donated: memory stays bounded

layer recompute = bwd(layer) - bwd(saved), both timed in the same run by the
caller's CostTiming (steady state). The profiler's `layer_recompute_time` (one
layer, the engine's program) should be within 10% of this figure / num_layers.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

import models
from models.units import unit_graphdef
from obscura_jax.observe.measure import CostTiming


def _model_fn(cfg, num_layers: int, variant: str):
    attn, mlp = unit_graphdef(cfg, "attn"), unit_graphdef(cfg, "mlp")
    cp = jax.checkpoint_policies
    if variant == "saved":
        keep = cp.save_only_these_names(*models.ops_for(cfg.family))
        run_attn = jax.checkpoint(lambda p, h: nnx.merge(attn, p)(h), policy=keep)
        run_mlp = jax.checkpoint(lambda p, h: nnx.merge(mlp, p)(h), policy=keep)

        def layer(pa, pm, h):
            return run_mlp(pm, run_attn(pa, h))
    elif variant == "layer":
        layer = jax.checkpoint(lambda pa, pm, h: nnx.merge(mlp, pm)(nnx.merge(attn, pa)(h)),
                               policy=cp.nothing_saveable)
    else:
        raise ValueError(f"unknown yardstick variant {variant!r}")

    def f(params, x):
        for i in range(num_layers):
            x = layer(params[2 * i], params[2 * i + 1], x)
        return x
    return f


def layer_yardstick(cfg, num_layers: int, seq_len: int, micro_batch: int, device,
                    timing: CostTiming) -> dict:
    """Forward and backward seconds of `num_layers` layers of `cfg` per variant, and
    the layer recompute (total and per layer), JSON-ready."""
    units = models.init_params(cfg, 0, (1, 1 + 2 * num_layers))
    names = models.unit_names(cfg)[1:1 + 2 * num_layers]
    params = jax.device_put([units[n] for n in names], device)
    key = jax.random.key(7)
    x = jax.device_put(jax.random.normal(key, (micro_batch, seq_len, cfg.hidden), jnp.float32)
                       .astype(cfg.compute_dtype), device)
    dy = jax.device_put(jax.random.normal(jax.random.fold_in(key, 1), x.shape, jnp.float32)
                        .astype(cfg.compute_dtype), device)
    out = {"model": cfg.name, "layers": num_layers, "seq_len": seq_len, "micro_batch": micro_batch,
           "device": str(getattr(device, "device_kind", device.platform)),
           "attention": getattr(cfg, "attention_impl", None), "variants": {}}
    first = True
    for variant in ("saved", "layer"):
        f = _model_fn(cfg, num_layers, variant)
        fwd = jax.jit(lambda p, h, f=f: jax.vjp(f, p, h))
        bwd = jax.jit(lambda pb, g, acc: jax.tree.map(jnp.add, acc, pb(g)[0]), donate_argnums=2)
        t_fwd = timing.time(lambda: fwd(params, x)[0], first)
        first = False
        _, pullback = fwd(params, x)
        residual = sum(a.nbytes for a in jax.tree.leaves(pullback) if getattr(a, "shape", None) == x.shape)
        grads = [jax.tree.map(jnp.zeros_like, params)]

        def step(pullback=pullback, bwd=bwd):
            grads[0] = bwd(pullback, dy, grads[0])
            return grads[0]
        t_bwd = timing.time(step, False)
        out["variants"][variant] = {"fwd_s": t_fwd, "bwd_s": t_bwd, "hidden_residual_bytes": int(residual)}
        del pullback, grads
    v = out["variants"]
    out["recompute_s"] = v["layer"]["bwd_s"] - v["saved"]["bwd_s"]
    out["recompute_per_layer_s"] = out["recompute_s"] / num_layers
    out["recompute_share_of_fwd"] = out["recompute_s"] / v["saved"]["fwd_s"]
    return out
