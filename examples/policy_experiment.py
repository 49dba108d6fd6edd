"""A jax.checkpoint policy experiment on your own stage: residual bytes and step time
per recompute set (op names of your choosing), and proof that none of them changes
the math.

The stage is llama2-tiny's units [1, 5) (two attention + MLP layers). Each policy
is a set of named ops to recompute (models.resolve_policy: presets, op names, or
unions); the engine compiles the stage under it and keeps exactly the residuals the
policy saves (obscura_jax.measure_stage times forward and backward standalone).

    python examples/policy_experiment.py [--model M] [--units 1,5] [--seq-len T]

Exits 0 only if every policy gives the plain stage's loss and gradients (rtol 1e-5),
recomputing everything keeps the least, recomputing nothing the most.
"""
from __future__ import annotations

import argparse
import sys

import jax
import jax.numpy as jnp
import numpy as np

import models
import obscura_jax

POLICIES = {                       # name -> what to recompute (presets and op names mix)
    "none": "none",
    "swiglu": "mlp_gate,mlp_up,mlp_act,mlp_mul",
    "attention core": "attn_core",
    "cmb": "cmb",
    "cmb + swiglu": ["cmb", "mlp_gate", "mlp_up"],
    "full": "full",
}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="llama2-tiny")
    ap.add_argument("--units", default="1,5", help="the stage's half-open unit range a,b")
    ap.add_argument("--seq-len", type=int, default=32)
    ap.add_argument("--micro-batch-size", type=int, default=4)
    args = ap.parse_args(argv)
    cfg = models.get_config(args.model)
    units = tuple(int(u) for u in args.units.split(","))
    b, t = args.micro_batch_size, args.seq_len
    params = models.init_params(cfg, 0, units)
    x = jax.random.normal(jax.random.key(0), (b, t, cfg.hidden), jnp.dtype(cfg.compute_dtype))

    def loss_and_grads(policy):
        stage = models.build_stage(cfg, units, policy)
        return jax.value_and_grad(lambda p, h: jnp.sum(stage.apply(p, h) ** 2), argnums=(0, 1))(params, x)

    ref_loss, ref_grads = loss_and_grads("none")
    print(f"{cfg.name} units {models.format_units(units)}, micro-batch {b} x {t}")
    print(f"{'policy':<16}{'recomputes':>11}{'residual/mb':>13}{'fwd ms':>9}{'bwd ms':>9}  same math")
    rows, ok = {}, True
    for name, spec in POLICIES.items():
        pol = models.resolve_policy(spec, cfg.family)
        timing = obscura_jax.measure_stage(cfg, units, pol, micro_batch_size=b, seq_len=t, reps=3)
        loss, grads = loss_and_grads(pol)
        same = bool(np.allclose(loss, ref_loss, rtol=1e-5)) and all(
            np.allclose(g, r, rtol=1e-5, atol=1e-6) for g, r in zip(jax.tree.leaves(grads), jax.tree.leaves(ref_grads)))
        ok &= same
        rows[name] = timing.residual_bytes
        print(f"{name:<16}{len(pol.recompute):>7} ops{timing.residual_bytes / 1024:>9.1f} KiB"
              f"{timing.fwd * 1e3:>9.3f}{timing.bwd * 1e3:>9.3f}  {'yes' if same else 'NO'}")
    ordered = rows["full"] == min(rows.values()) and rows["none"] == max(rows.values())
    print(f"full keeps the least ({rows['full']} B), none the most ({rows['none']} B): "
          f"{'yes' if ordered else 'NO'}; every policy the same loss and gradients: {'yes' if ok else 'NO'}")
    print("(step times are one CPU run each: compare them on your GPU; the bytes are exact)")
    return 0 if ok and ordered else 1


if __name__ == "__main__":
    sys.exit(main())
