"""A policy's offload set (residuals to pinned host memory) through the engine's
stage program: it compiles and runs where the backend has host memory (the CPU
here: jax 0.10.2 returns the offloaded residuals in the CPU device's pinned_host
memory), keeps the offloaded residuals in host memory, counts them as host bytes,
and changes no gradient."""
import jax
import numpy as np

import models
from obscura_jax import measure_stage
from obscura_jax.run.data import BatchShape
from obscura_jax.runtime.pipeline import build_program


def test_offloaded_residuals_live_on_host_and_change_no_gradient():
    cfg = models.get_config("llama2-tiny")
    device = jax.devices()[0]
    shape = BatchShape(1, 2, 16)
    offload = models.resolve_policy("none", "llama", offload="mlp_act")
    progs = {name: build_program(cfg, (1, 3), pol, device, shape)
             for name, pol in (("none", models.resolve_policy("none", "llama")), ("offload", offload))}
    params = jax.device_put(models.init_params(cfg, 0, (1, 3)), device)
    x = jax.device_put(jax.random.normal(jax.random.key(0), (2, 16, cfg.hidden)), device)
    dy = jax.device_put(jax.random.normal(jax.random.key(1), (2, 16, cfg.hidden)), device)
    grads = {}
    for name, prog in progs.items():
        _, res = prog.forward(params, x)
        kinds = [leaf.sharding.memory_kind for leaf in res.leaves]
        assert ("pinned_host" in kinds) == (name == "offload")
        grads[name], dx, _ = prog.backward(params, res, dy, prog.zero_grads(params))
    for a, b in zip(jax.tree.leaves(grads["none"]), jax.tree.leaves(grads["offload"]), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-7)
    # by memory kind: the offloaded residual is host bytes, the rest what `none` keeps on the device
    plain, off = progs["none"], progs["offload"]
    assert off.residual_host_bytes > 0 and plain.residual_host_bytes == 0
    assert off.residual_bytes + off.residual_host_bytes == plain.residual_bytes
    assert off.residual_memory_kinds == {"device": off.residual_bytes, "pinned_host": off.residual_host_bytes}
    assert res.device_bytes == off.residual_bytes and res.offloaded_bytes == off.residual_host_bytes
    t = measure_stage("llama2-tiny", (1, 3), offload, seq_len=16, reps=1)
    assert t.fwd > 0 and t.bwd > 0
    assert (t.residual_bytes, t.residual_host_bytes) == (off.residual_bytes, off.residual_host_bytes)
