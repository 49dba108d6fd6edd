"""The unpipelined reference (obscura_jax.run.reference): its jitted step is kept per
(model, optimizer, policy), so checking several schedules in one process traces and
compiles it once, and a kept step gives what a fresh one gives."""
import jax
import numpy as np

import models
from obscura_jax.run.data import BatchShape, open_data
from obscura_jax.runtime.executor import make_optimizer
from obscura_jax.run.reference import _train_step, reference_train


def _batches(cfg, steps=2):
    data = open_data("synthetic", model_vocab=cfg.vocab_size, seed=0)
    return [data.batch(i, BatchShape(2, 2, 8)) for i in range(steps)]


def test_one_optimizer_object_per_setting():
    assert make_optimizer("adamw", 1e-3, 0.01) is make_optimizer("adamw", 1e-3, 0.01)
    assert make_optimizer("adamw", 1e-3, 0.01) is not make_optimizer("adamw", 2e-3, 0.01)
    assert make_optimizer("sgd", 1e-3) is not make_optimizer("adam", 1e-3)


def test_the_step_is_built_once_and_equals_a_fresh_one():
    cfg = models.get_config("llama2-tiny")
    params0, batches, opt = models.init_params(cfg, 0), _batches(cfg), make_optimizer()
    first, params_first = reference_train(cfg, params0, batches, opt)
    before = _train_step.cache_info()
    again, params_again = reference_train(cfg, params0, batches, opt)
    after = _train_step.cache_info()
    assert after.hits == before.hits + 1 and after.misses == before.misses
    assert again == first
    for a, b in zip(jax.tree.leaves(params_first), jax.tree.leaves(params_again), strict=True):
        np.testing.assert_array_equal(a, b)
    # another learning rate: another optimizer object, another step, another result
    other, _ = reference_train(cfg, params0, batches, make_optimizer(learning_rate=1e-2))
    assert _train_step.cache_info().misses == after.misses + 1 and other[1] != first[1]


def test_an_unhashable_policy_gets_a_step_of_its_own():
    # a policy may be a list of op or preset names (models.resolve_policy): not a cache key
    cfg = models.get_config("llama2-tiny")
    params0, batches, opt = models.init_params(cfg, 0), _batches(cfg, steps=1), make_optimizer()
    as_list, _ = reference_train(cfg, params0, batches, opt, policy=["full"])
    as_name, _ = reference_train(cfg, params0, batches, opt, policy="full")
    np.testing.assert_allclose(as_list, as_name, rtol=1e-6)
