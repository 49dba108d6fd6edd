"""models.aux_loss: a unit's auxiliary loss joins the loss through its gradient at
the micro-batch's weight, so m micro-batches at 1/m give the whole batch's
gradient (examples/moe.py's MoE MLP returns one)."""
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import models
from models.aux_loss import attach_aux_loss, split_output
from models.errors import ModelConfigError

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
import moe  # noqa: E402  registers moe-tiny


def test_the_aux_gradient_arrives_at_its_weight_whatever_comes_from_downstream():
    def f(theta, x, weight):
        y = attach_aux_loss(x * theta, theta ** 2, weight)
        return jnp.sum(3.0 * y)
    g = jax.grad(f)(2.0, jnp.ones(4), 0.25)
    assert g == pytest.approx(3.0 * 4 + 0.25 * 2 * 2.0)


def test_micro_batches_at_one_over_m_give_the_whole_batch_gradient():
    cfg = models.get_config("moe-tiny")
    params = models.init_params(cfg, 0)
    key = jax.random.key(3)
    tokens = jax.random.randint(key, (8, 16), 0, cfg.vocab_size)
    targets = jax.random.randint(jax.random.fold_in(key, 1), (8, 16), 0, cfg.vocab_size)
    whole = jax.jit(jax.grad(lambda p: models.model_loss(cfg, p, tokens, targets)))(params)
    m = 4

    def pipelined(weight):
        stage = models.build_stage(cfg, (0, cfg.num_units), "none", aux_weight=weight)
        grad = jax.jit(jax.grad(lambda p, x, t: stage.apply(p, x, t) / m))
        grads = [grad(params, tokens[i::m], targets[i::m]) for i in range(m)]
        return jax.tree.map(lambda *g: sum(g), *grads)
    for a, b in zip(jax.tree.leaves(whole), jax.tree.leaves(pipelined(1 / m)), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-7)
    wrong = pipelined(1.0)   # the aux at weight 1 per micro-batch: its gradient m times too large
    router = lambda g: np.asarray(g["mlp_0"]["router"]["kernel"])  # noqa: E731
    assert not np.allclose(router(whole), router(wrong), rtol=1e-3)


def test_a_unit_output_is_y_or_y_and_a_scalar():
    y = jnp.ones((1, 2, 3))
    assert split_output(y, "mlp")[1] is None
    assert split_output((y, jnp.float32(2)), "mlp")[1] == 2
    with pytest.raises(ModelConfigError, match="scalar"):
        split_output((y, jnp.ones(2)), "mlp_0")
    with pytest.raises(ModelConfigError, match="tuple of 3"):
        split_output((y, y, y), "mlp_0")
