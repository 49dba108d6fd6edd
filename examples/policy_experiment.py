"""A jax.checkpoint policy experiment on your own stage: per policy (a recompute set,
an offload set, or both) the residual bytes kept on the device and in host memory
and the stage's forward and backward time, all measured; and proof that none of
them changes the math.

The stage is llama2-tiny's units [1, 5) (two attention + MLP layers). A policy
recomputes some named ops and may offload others to pinned host memory
(models.resolve_policy: presets, op names, or unions; `offload=` the ops to keep on
the host); the engine compiles the stage under it (obscura_jax.measure_stage times
forward and backward standalone) and reports what its compiled forward keeps in
device memory and what in host memory, by the memory kind JAX gives each residual.

    python examples/policy_experiment.py [--model M] [--units 1,5] [--seq-len T]

Exits 0 only if every policy gives the plain stage's loss and gradients (rtol 1e-5),
recomputing everything keeps the least on the device, recomputing nothing the most,
and each offload policy keeps on the device what its recompute set alone keeps less
what it moved to the host.
"""
from __future__ import annotations

import argparse
import sys

import jax
import jax.numpy as jnp
import numpy as np

import models
import obscura_jax

POLICIES = {                       # name -> (what to recompute, what to offload); presets and op names mix
    "none": ("none", ()),
    "swiglu": ("mlp_gate,mlp_up,mlp_act,mlp_mul", ()),
    "attention core": ("attn_core", ()),
    "cmb": ("cmb", ()),
    "cmb + swiglu": (["cmb", "mlp_gate", "mlp_up"], ()),
    "full": ("full", ()),
    "offload gate,up": ("none", "mlp_gate,mlp_up"),
    "cmb, offload g,u": ("cmb", "mlp_gate,mlp_up"),
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
        # jitted: an offloading policy places its residuals in host memory inside a compiled program
        return jax.jit(jax.value_and_grad(lambda p, h: jnp.sum(stage.apply(p, h) ** 2), argnums=(0, 1)))(params, x)

    ref_loss, ref_grads = loss_and_grads("none")
    print(f"{cfg.name} units {models.format_units(units)}, micro-batch {b} x {t}")
    print(f"{'policy':<18}{'recomputes':>11}{'offloads':>9}{'device/mb':>13}{'host/mb':>12}"
          f"{'fwd ms':>9}{'bwd ms':>9}  same math")
    device, host, ok = {}, {}, True
    for name, (recompute, offload) in POLICIES.items():
        pol = models.resolve_policy(recompute, cfg.family, offload=offload)
        timing = obscura_jax.measure_stage(cfg, units, pol, micro_batch_size=b, seq_len=t, reps=3)
        loss, grads = loss_and_grads(pol)
        same = bool(np.allclose(loss, ref_loss, rtol=1e-5)) and all(
            np.allclose(g, r, rtol=1e-5, atol=1e-6) for g, r in zip(jax.tree.leaves(grads), jax.tree.leaves(ref_grads)))
        ok &= same
        device[name], host[name] = timing.residual_bytes, timing.residual_host_bytes
        print(f"{name:<18}{len(pol.recompute):>7} ops{len(pol.offload):>5} ops{timing.residual_bytes / 1024:>9.1f} KiB"
              f"{timing.residual_host_bytes / 1024:>8.1f} KiB{timing.fwd * 1e3:>9.3f}{timing.bwd * 1e3:>9.3f}"
              f"  {'yes' if same else 'NO'}")
    ordered = device["full"] == min(device.values()) and device["none"] == max(device.values())
    # an offload set moves bytes from the device to the host: what the recompute set alone keeps, split
    moved = all(host[name] > 0 and device[name] + host[name] == device[_recompute_only(recompute)]
                for name, (recompute, offload) in POLICIES.items() if offload)
    print(f"full keeps the least on the device ({device['full']} B), none the most ({device['none']} B): "
          f"{'yes' if ordered else 'NO'}; every offload policy moves bytes to the host and keeps the rest on the "
          f"device: {'yes' if moved else 'NO'}; every policy the same loss and gradients: {'yes' if ok else 'NO'}")
    if jax.devices()[0].platform == "cpu":
        print("(on a CPU device, JAX's device and pinned_host memories are both this machine's RAM: the bytes are "
              "split by memory kind; step times are one CPU run each: compare them on your GPU)")
    return 0 if ok and ordered and moved else 1


def _recompute_only(recompute) -> str:
    """The policy of POLICIES that recomputes `recompute` and offloads nothing."""
    return next(name for name, (r, o) in POLICIES.items() if r == recompute and not o)


if __name__ == "__main__":
    sys.exit(main())
