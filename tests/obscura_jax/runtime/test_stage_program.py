import jax
import jax.numpy as jnp
import numpy as np
import pytest

from obscura_jax.runtime.stage_program import StageProgram
from tests.obscura_jax import toy_stages as toy


def run_chain(progs, ps, tokens, targets):
    devs = [p.device for p in progs]
    y0, r0 = progs[0].forward(jax.device_put(ps[0], devs[0]), jax.device_put(tokens, devs[0]))
    y1, r1 = progs[1].forward(jax.device_put(ps[1], devs[1]), jax.device_put(y0, devs[1]))
    loss, r2 = progs[2].forward(jax.device_put(ps[2], devs[2]), jax.device_put(y1, devs[2]),
                                jax.device_put(targets, devs[2]))
    grads = []
    dy = progs[2].loss_weight(1)
    for s, res in ((2, r2), (1, r1), (0, r0)):
        g, dx, done = progs[s].backward(jax.device_put(ps[s], devs[s]), res, dy, progs[s].zero_grads())
        grads.insert(0, g)
        if s:
            dy = jax.device_put(dx, devs[s - 1])
        else:
            assert dx is None and done.shape == ()
    return loss, grads, (r0, r1, r2)


def test_split_vjp_matches_grad_across_devices():
    devs = jax.devices()[:3]
    progs = toy.programs(devs)
    ps = toy.params()
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, toy.V, (toy.B, toy.T)).astype(np.int32)
    targets = rng.integers(0, toy.V, (toy.B, toy.T)).astype(np.int32)
    loss, grads, _ = run_chain(progs, ps, tokens, targets)
    ref_loss, ref_grads = jax.value_and_grad(toy.full_loss)(ps, tokens, targets)
    np.testing.assert_allclose(float(loss), float(ref_loss), rtol=1e-6)
    for g, r in zip(grads, ref_grads):
        for a, b in zip(jax.tree.leaves(g), jax.tree.leaves(r)):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-7)
    # Each stage's grads live on that stage's device.
    assert all(jax.tree.leaves(g)[0].devices() == {p.device} for g, p in zip(grads, progs))


def test_residuals_hold_no_parameter_copies():
    # A wide layer: params (256x256 floats = 256 KiB) dwarf one micro-batch's activations.
    dev = jax.devices()[0]
    d = 256
    p = {"w": jnp.ones((d, d)) * 0.01}
    prog = StageProgram(toy.layer, takes_tokens=False, returns_loss=False, device=dev,
                        params_like=p, x_like=jnp.zeros((1, 2, d)))
    assert prog.params_bytes == d * d * 4
    # x and tanh's output (or its derivative) are all the backward needs: a few KiB.
    assert prog.residual_bytes <= 4 * 2 * d * 4
    assert any(src == 0 for src, _ in prog.layout.sources), "the pullback must use the param"
    x = jax.device_put(jnp.ones((1, 2, d)), dev)
    _, res = prog.forward(jax.device_put(p, dev), x)
    # The stage input is kept by reference, not copied.
    assert prog.layout.keeps_input and res.leaves[0] is x
    assert res.nbytes == prog.residual_bytes


def test_backward_refuses_residuals_left_on_host():
    devs = jax.devices()[:3]
    progs = toy.programs(devs)
    ps = jax.device_put(toy.params()[1], devs[1])
    _, res = progs[1].forward(ps, jax.device_put(jnp.ones((toy.B, toy.T, toy.D)), devs[1]))
    from obscura_jax.runtime.swap import HostSwap
    out = HostSwap().swap_out(res, 1.0, devs[1])
    with pytest.raises(ValueError, match="missing SI"):
        progs[1].backward(ps, out, jnp.ones((toy.B, toy.T, toy.D)), progs[1].zero_grads())


def test_loss_stage_needs_targets():
    with pytest.raises(ValueError, match="targets"):
        StageProgram(toy.head, takes_tokens=False, returns_loss=True, device=jax.devices()[0],
                     params_like=toy.params()[2], x_like=jnp.zeros((toy.B, toy.T, toy.D)))
