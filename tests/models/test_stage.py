"""Composing stage functions of any unit partition (each stage its own policy,
run forward then backward the way a pipeline engine does; eagerly, because a
compile per stage would cost more than the tiny math) reproduces the whole
model's loss and gradients."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import models
from tests.budget import examples

POLICIES = ("none", "cmb", "full", "mlp", "selective")


def _pipeline_loss_and_grads(cfg, params, tokens, targets, ranges, policies):
    stages = [models.build_stage(cfg, r, pol) for r, pol in zip(ranges, policies)]
    x, backwards = tokens, []
    for stage in stages:                              # forward: F of every stage
        sp = models.stage_params(params, stage.unit_range, cfg)
        if stage.is_last:
            y, bwd = jax.vjp(lambda p, x, s=stage: s.apply(p, x, targets), sp, x)
        else:
            y, bwd = jax.vjp(stage.apply, sp, x)
        backwards.append(bwd)
        x = y
    loss, dy, grads = x, jnp.ones_like(x), {}
    for stage, bwd in zip(reversed(stages), reversed(backwards)):  # backward: B of every stage
        dparams, dx = bwd(dy)
        grads.update(dparams)
        dy = dx
    assert dy.dtype == jax.dtypes.float0 or not jnp.any(dy)  # tokens have no gradient
    return loss, grads


@pytest.fixture(scope="module")
def whole_model(tiny):
    cfg, params, tokens, targets = tiny
    return jax.jit(jax.value_and_grad(lambda p: models.model_loss(cfg, p, tokens, targets)))(params)


def _check(tiny, whole_model, ranges, policies):
    cfg, params, tokens, targets = tiny
    want_loss, want_grads = whole_model
    loss, grads = _pipeline_loss_and_grads(cfg, params, tokens, targets, ranges, policies)
    np.testing.assert_allclose(loss, want_loss, rtol=1e-5)
    assert set(grads) == set(want_grads) == set(models.unit_names(cfg))
    for g, w in zip(jax.tree.leaves(grads), jax.tree.leaves({k: want_grads[k] for k in grads})):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("num_stages", [3, 6])
def test_even_partitions_compose_to_the_model(tiny, whole_model, num_stages):
    ranges = models.even_partition(tiny[0].num_units, num_stages)
    _check(tiny, whole_model, ranges, [POLICIES[i % len(POLICIES)] for i in range(num_stages)])


@settings(max_examples=examples(2), deadline=None)
@given(data=st.data())
def test_random_partitions_compose_to_the_model(tiny, whole_model, data):
    n = tiny[0].num_units
    cuts = sorted(data.draw(st.sets(st.integers(1, n - 1), max_size=n - 1), label="cuts"))
    bounds = [0, *cuts, n]
    ranges = list(zip(bounds[:-1], bounds[1:]))
    policies = data.draw(st.lists(st.sampled_from(POLICIES), min_size=len(ranges),
                                  max_size=len(ranges)), label="policies")
    _check(tiny, whole_model, ranges, policies)
