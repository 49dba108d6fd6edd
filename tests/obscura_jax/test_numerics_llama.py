"""llama2-tiny: the pipeline engine equals the plain model (see numerics_cases.py)."""
import pytest

from tests.obscura_jax.numerics_cases import (CASES, IDS, REDERIVE_CASES, REDERIVE_IDS, ZOO_CASES, ZOO_IDS,
                                              check_pipeline_equals_plain_model, make_reference)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def reference():
    return make_reference("llama2-tiny")


@pytest.mark.parametrize("schedule, kw", CASES, ids=IDS)
def test_pipeline_equals_plain_model(reference, schedule, kw):
    check_pipeline_equals_plain_model(reference, schedule, kw)


@pytest.mark.parametrize("schedule, kw", ZOO_CASES, ids=ZOO_IDS)
def test_chunked_and_split_backward_schedules_equal_plain_model(reference, schedule, kw):
    check_pipeline_equals_plain_model(reference, schedule, kw)


@pytest.mark.parametrize("schedule, kw", REDERIVE_CASES, ids=REDERIVE_IDS)
def test_a_w_that_rederives_its_inputs_equals_plain_model(reference, schedule, kw):
    check_pipeline_equals_plain_model(reference, schedule, kw)


def test_obscura_with_swapping_equals_plain_model_under_sgd():
    """Adam amplifies rounding noise in near-zero gradients, hence its absolute
    tolerance above; with SGD the final params must agree at rtol 1e-5 and an
    absolute 1e-7 only (checks.tolerances)."""
    import jax
    import numpy as np

    import models
    from obscura_jax.run.checks import tolerances
    from obscura_jax.run.data import BatchShape, open_data
    from obscura_jax.runtime.executor import make_optimizer
    from obscura_jax.runtime.placement import place_stages
    from obscura_jax.run.reference import reference_train
    from obscura_jax.run.trainer import train
    from tests.obscura_jax.numerics_cases import B, M, P, STEPS, T, run_config

    run = run_config("llama2-tiny", "obscura", adjusted=1, swap_blocks=2, swap_fraction=0.5,
                     optimizer="sgd", learning_rate=0.5)
    cfg = models.get_config("llama2-tiny")
    data = open_data("synthetic", model_vocab=cfg.vocab_size, seed=0)
    batches = [data.batch(i, BatchShape(M, B, T)) for i in range(STEPS)]
    ref_losses, ref_params = reference_train(cfg, models.init_params(cfg, 0), batches,
                                             make_optimizer("sgd", 0.5, run.weight_decay))
    out = train(run, lambda p: place_stages(p, "cpu", P), log=lambda *_: None)
    np.testing.assert_allclose([s.loss for s in out.steps], ref_losses, rtol=1e-5)
    assert ref_losses[-1] < ref_losses[0]  # the step size is large enough to matter
    rtol, atol = tolerances(run, cfg)
    assert atol == 1e-7
    got, ref = out.stage_params(), jax.device_get(ref_params)
    for name in ref:
        for a, b in zip(jax.tree.leaves(got[name]), jax.tree.leaves(ref[name]), strict=True):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=rtol, atol=atol, err_msg=name)
