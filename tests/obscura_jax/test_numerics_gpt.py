"""gpt3-tiny: the pipeline engine equals the plain model (see numerics_cases.py)."""
import pytest

from tests.obscura_jax.numerics_cases import (CASES, IDS, REDERIVE_CASES, REDERIVE_IDS, ZOO_CASES, ZOO_IDS,
                                              check_pipeline_equals_plain_model, make_reference)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def reference():
    return make_reference("gpt3-tiny")


@pytest.mark.parametrize("schedule, kw", CASES, ids=IDS)
def test_pipeline_equals_plain_model(reference, schedule, kw):
    check_pipeline_equals_plain_model(reference, schedule, kw)


@pytest.mark.parametrize("schedule, kw", ZOO_CASES, ids=ZOO_IDS)
def test_chunked_and_split_backward_schedules_equal_plain_model(reference, schedule, kw):
    check_pipeline_equals_plain_model(reference, schedule, kw)


@pytest.mark.parametrize("schedule, kw", REDERIVE_CASES, ids=REDERIVE_IDS)
def test_a_w_that_rederives_its_inputs_equals_plain_model(reference, schedule, kw):
    check_pipeline_equals_plain_model(reference, schedule, kw)
