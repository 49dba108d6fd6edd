"""The compiled split backward (obscura_jax.runtime.split_program): I takes the residual
leaves only it reads donated, so XLA writes W's cotangents into them instead of
beside them; the twin that keeps the residuals computes the same; the stage's own
input (the caller's buffer) is never donated."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import models
from obscura_jax.run.data import BatchShape
from obscura_jax.runtime.pipeline import build_program
from obscura_jax.runtime.split_program import memory_of

SHAPE = BatchShape(2, 1, 64)


def _layers(model: str, **overrides):
    """A stage of the model's layers (no embedding, no head) and real residuals."""
    cfg = models.get_config(model, **overrides)
    units = (1, cfg.num_units - 1)
    prog = build_program(cfg, units, "none", jax.devices()[0], SHAPE, True)
    params = models.init_params(cfg, 0, unit_range=units)
    key = jax.random.key(4)
    x = jax.random.normal(key, (1, SHAPE.seq_len, cfg.hidden), jnp.float32).astype(cfg.compute_dtype)
    out, res = prog.forward(params, x)
    dy = jax.random.normal(jax.random.fold_in(key, 1), out.shape, jnp.float32).astype(out.dtype)
    return prog, params, x, res, dy


@pytest.mark.parametrize("model", ["llama2-tiny", "gpt3-tiny"])
def test_i_writes_w_cotangents_into_the_residuals_it_alone_reads(model):
    prog, params, x, res, dy = _layers(model, num_layers=3)
    prog.compile_split()
    i_mem = memory_of(prog._bwd_input)
    made, beside = prog.weight_grad_made_bytes, prog.weight_grad_beside_bytes
    # without the donation I allocates every made byte beside the residuals it read;
    # on a CPU XLA reuses donated leaves for nearly all of them
    assert 0 <= beside < made / 2, (beside, made)
    assert beside == i_mem["output"] - i_mem["alias"] - prog.output_bytes    # dx: layers keep their shape

    donated = [res.leaves[i] for i in prog._i_donated]
    assert donated and not any(a.is_deleted() for a in donated)
    _, dx_kept, held_kept, _ = prog.input_grad(params, res, dy, prog.zero_grads(), keep_residuals=True)
    assert not any(a.is_deleted() for a in res.leaves)
    _, dx_i, held, _ = prog.input_grad(params, res, dy, prog.zero_grads())
    assert any(a.is_deleted() for a in donated)     # those XLA wrote into (the rest were not usable)
    assert not x.is_deleted()           # the stage's own input is the caller's
    np.testing.assert_array_equal(np.asarray(dx_i), np.asarray(dx_kept))
    for a, b in zip(held.leaves, held_kept.leaves, strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
