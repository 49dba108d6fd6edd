"""The split backward cut on the jaxpr: I + W give the fused backward's gradients,
W runs only the weight-gradient work, and what W holds is what it reads."""
import collections

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import models
from obscura_jax.runtime.backward_split import split_backward
from obscura_jax.run.data import BatchShape
from obscura_jax.runtime.pipeline import build_program

SHAPE = BatchShape(2, 2, 16)
# weight matmuls per unit kind: attention q, k, v (or fused qkv), o; MLP gate, up, down (GPT: fc, proj)
WEIGHT_DOTS = {("llama", "attn"): 4, ("llama", "mlp"): 3, ("gpt", "attn"): 2, ("gpt", "mlp"): 2}


def _program(model: str, unit_range, policy):
    cfg = models.get_config(model)
    return cfg, build_program(cfg, unit_range, policy, jax.devices()[0], SHAPE, True)


def _forward_residuals(cfg, prog, unit_range):
    """Real residuals: the stage's own forward on random inputs."""
    params = models.init_params(cfg, 0, unit_range=unit_range)
    x_spec = models.build_stage(cfg, unit_range).input_spec(SHAPE.micro_batch_size, SHAPE.seq_len)
    key = jax.random.key(1)
    if unit_range[0] == 0:
        x = jax.random.randint(key, x_spec.shape, 0, cfg.vocab_size, jnp.int32)
    else:
        x = jax.random.normal(key, x_spec.shape, jnp.float32).astype(x_spec.dtype)
    targets = jax.random.randint(jax.random.fold_in(key, 1), (SHAPE.micro_batch_size, SHAPE.seq_len),
                                 0, cfg.vocab_size, jnp.int32)
    out, res = prog.forward(params, x, targets) if prog.returns_loss else prog.forward(params, x)
    dy = prog.loss_weight(4) if prog.returns_loss else jax.random.normal(
        jax.random.fold_in(key, 2), out.shape, jnp.float32).astype(out.dtype)
    return params, res, dy


# every stage position (token stage, middle, loss stage) x saved / recomputed, and one
# per-op policy: 13 compilations of B + I + W
CASES = [(m, r, pol) for m in ("llama2-tiny", "gpt3-tiny") for r in ((0, 3), (1, 5), (5, 10))
         for pol in ("none", "full")] + [("llama2-tiny", (1, 5), "cmb")]


@pytest.mark.parametrize("model,unit_range,policy", CASES)
def test_input_and_weight_halves_equal_the_fused_backward(model, unit_range, policy):
    cfg, prog = _program(model, unit_range, policy)
    params, res, dy = _forward_residuals(cfg, prog, unit_range)
    grads, dx, _ = prog.backward(params, res, dy, prog.zero_grads())
    dx_i, held, _ = prog.input_grad(params, res, dy)
    got, _ = prog.weight_grad(params, held, dy, prog.zero_grads())
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(grads)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-7)
    if dx is None:
        assert dx_i is None
    else:
        np.testing.assert_allclose(np.asarray(dx_i), np.asarray(dx), rtol=1e-6, atol=1e-7)
    assert held.nbytes == prog.weight_grad_held_bytes == sum(held.sizes)
    assert len(held.leaves) == len(prog.weight_grad_leaf_bytes)


def _cut(prog):
    backward, specs, n = prog._flat_backward()
    return split_backward(backward, specs, n)


def _dots(cut, which) -> int:
    return sum(cut.jaxpr.eqns[i].primitive.name == "dot_general" for i in which)


@pytest.mark.parametrize("model", ["llama2-tiny", "gpt3-tiny"])
@pytest.mark.parametrize("policy", ["none", "full"])
def test_w_runs_only_the_weight_matmuls(model, policy):
    """A middle stage of attn_0 mlp_0 attn_1 mlp_1: W holds exactly one dot per
    weight matmul (x^T dy); the cotangent chain (and any recompute) is in I only."""
    cfg, prog = _program(model, (1, 5), policy)
    cut = _cut(prog)
    per_layer = WEIGHT_DOTS[(cfg.family, "attn")] + WEIGHT_DOTS[(cfg.family, "mlp")]
    if cfg.family == "gpt" and _dots(cut, cut.w_eqns) != 2 * per_layer:
        per_layer = 6            # GPT with separate q, k, v projections
    assert _dots(cut, cut.w_eqns) == 2 * per_layer
    assert not set(cut.i_eqns) & set(cut.w_eqns)
    # the fused backward does every dot once (recompute aside), the cut adds none
    backward, specs, n = prog._flat_backward()
    fused = split_backward(backward, specs, n)
    assert _dots(cut, cut.i_eqns) + _dots(cut, cut.w_eqns) == _dots(fused, range(len(fused.jaxpr.eqns)))


def test_token_stage_has_no_input_half():
    """The first stage takes tokens: nothing upstream waits, so I is empty and W does
    the whole backward on the residuals it keeps."""
    _, prog = _program("llama2-tiny", (0, 3), "none")
    cut = _cut(prog)
    assert cut.i_eqns == () and cut.held_vars == ()
    prog.compile_split()
    assert prog.weight_grad_held_bytes == prog.residual_bytes


def test_w_holds_less_than_the_residuals_plus_all_cotangents():
    """Without recompute, W keeps the matmul inputs among the residuals (the attention
    core's and the activations' internals are freed at I's end) and one cotangent per
    weight matmul output: less than the residuals plus every output cotangent."""
    _, prog = _program("llama2-tiny", (1, 5), "none")
    prog.compile_split()
    kept = sum(prog.residual_leaf_bytes[i] for i in prog._w_res)
    assert kept < prog.residual_bytes
    assert prog.weight_grad_held_bytes < prog.residual_bytes + prog.weight_grad_held_bytes - kept


def test_call_like_equations_are_inlined():
    """Each unit runs under jax.checkpoint (remat) and may call jitted helpers: the
    cut sees through both, so no call-like equation is left in the flat jaxpr."""
    _, prog = _program("gpt3-tiny", (1, 5), "cmb")
    names = collections.Counter(e.primitive.name for e in _cut(prog).jaxpr.eqns)
    assert not {"remat2", "checkpoint", "pjit", "jit", "closed_call"} & set(names)


def test_a_function_whose_weight_grads_feed_nothing_else():
    """A hand-written backward that recomputes its forward: y = tanh(x @ w); the cut
    puts x @ w, tanh' and dx = g w^T in I and dw = x^T g in W, holding g (the matmul
    output cotangent) and reading x."""
    def loss_backward(w, x, dy):
        _, pull = jax.vjp(lambda w, x: jnp.tanh(x @ w), w, x)
        dw, dx = pull(dy)
        return [dw, dx]
    spec = jax.ShapeDtypeStruct((8, 8), jnp.float32)
    cut = split_backward(loss_backward, [spec, spec, spec], 1)
    assert cut.kept_args == (1,)                       # W reads x, not w or dy
    assert [a.shape for a in cut.held_avals] == [(8, 8)]
    assert _dots(cut, cut.w_eqns) == 1 and _dots(cut, cut.i_eqns) == 2
    w, x, dy = (jax.random.normal(jax.random.key(i), (8, 8)) for i in range(3))
    dx, held = jax.jit(cut.input_grad)(w, x, dy)
    (dw,) = jax.jit(cut.weight_grad)([x], held)
    ref_dw, ref_dx = jax.jit(loss_backward)(w, x, dy)
    np.testing.assert_allclose(np.asarray(dw), np.asarray(ref_dw), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(dx[0]), np.asarray(ref_dx), rtol=1e-6)
