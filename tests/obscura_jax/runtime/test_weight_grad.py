"""A split backward's W options (obscura_jax.runtime.weight_grad): the head's W at
once by the shapes' rule or the switch, holding nothing and changing no gradient."""
import jax
import numpy as np
import pytest

import models
from obscura_jax.observe.measure import unit_weight_grad_bytes
from obscura_jax.run.data import BatchShape
from obscura_jax.runtime.pipeline import build_program
from obscura_jax.runtime.weight_grad import WeightGrad

SMALL_VOCAB = models.get_config("llama2-tiny", vocab_size=128)   # the head's W: more bytes per FLOP than a layer's


def test_options_are_validated():
    with pytest.raises(ValueError, match="mode must be one of hold, rederive"):
        WeightGrad("recompute")
    with pytest.raises(ValueError, match="head weight-grad must be one of auto, defer, at-once"):
        WeightGrad(head="never")


@pytest.mark.parametrize("cfg, head, want", [
    (SMALL_VOCAB, "auto", {"head"}), (SMALL_VOCAB, "defer", set()), (SMALL_VOCAB, "at-once", {"head"}),
    (models.get_config("llama2-tiny"), "auto", set()), (models.get_config("llama2-tiny"), "at-once", {"head"})])
def test_the_head_runs_at_once_by_the_rule_or_the_switch(cfg, head, want):
    options = WeightGrad("hold", head)
    assert options.at_once_units(cfg, (7, cfg.num_units), 16, 2) == want
    assert options.at_once_units(cfg, (1, 5), 16, 2) == set()        # no head in the stage


def test_a_head_at_once_holds_nothing_and_keeps_the_gradients():
    """The loss stage's head under --head-weight-grad at-once: I adds its weight
    gradient to the accumulator, W holds nothing for it (the head alone holds nothing
    at all, the profile's figure), and the gradients are the fused backward's."""
    cfg = models.get_config("llama2-tiny")
    shape, r = BatchShape(2, 2, 16), (cfg.num_units - 1, cfg.num_units)
    prog = build_program(cfg, r, "none", jax.devices()[0], shape, True, WeightGrad(head="at-once"))
    deferred = build_program(cfg, r, "none", jax.devices()[0], shape, True)
    assert unit_weight_grad_bytes(prog) == 0 < unit_weight_grad_bytes(deferred)
    params = models.init_params(cfg, 0, unit_range=r)
    key = jax.random.key(3)
    x = jax.random.normal(key, (2, 16, cfg.hidden), np.float32)
    targets = jax.random.randint(key, (2, 16), 0, cfg.vocab_size)
    _, res = prog.forward(params, x, targets)
    dy = prog.loss_weight(2)
    grads, dx, _ = prog.backward(params, res, dy, prog.zero_grads())
    acc, dx_i, held, _ = prog.input_grad(params, res, dy, prog.zero_grads())
    assert held.nbytes == 0
    got, _ = prog.weight_grad(params, held, dy, acc)
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(grads), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    np.testing.assert_array_equal(np.asarray(dx_i), np.asarray(dx))
