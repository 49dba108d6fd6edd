"""gpt3-tiny: the pipeline engine equals the plain model (see numerics_cases.py)."""
import pytest

from tests.obscura_jax.numerics_cases import CASES, IDS, check_pipeline_equals_plain_model, make_reference

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def reference():
    return make_reference("gpt3-tiny")


@pytest.mark.parametrize("schedule, kw", CASES, ids=IDS)
def test_pipeline_equals_plain_model(reference, schedule, kw):
    check_pipeline_equals_plain_model(reference, schedule, kw)
