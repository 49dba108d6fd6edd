"""tests/budget.py and the hypothesis profiles tests/conftest.py registers: make test
draws each property test's own count (quick), make test-long ten times it (thorough)."""
import re

import pytest
from hypothesis import settings

from tests import conftest
from tests.budget import QUICK_MAX_EXAMPLES, examples


@pytest.fixture
def profile():
    """Load a profile by name for the test; the suite's own profile is put back after."""
    before = settings.get_current_profile_name()
    yield settings.load_profile
    settings.load_profile(before)


@pytest.mark.parametrize("name, scale", [("quick", 1), ("thorough", 10)])
def test_examples_scale_with_the_loaded_profile(profile, name, scale):
    profile(name)
    assert settings().max_examples == QUICK_MAX_EXAMPLES * scale
    assert [examples(n) for n in (1, 7, 40)] == [scale, 7 * scale, 40 * scale]
    assert settings().deadline is None      # a busy machine is not a bug


def _recipe(target: str) -> str:
    """The Makefile's command lines for `target`."""
    text = (conftest.ROOT / "Makefile").read_text()
    return re.search(rf"^{target}:.*\n((?:\t.*\n)+)", text, re.M).group(1)


def test_make_test_long_loads_the_thorough_profile_and_make_test_the_default():
    assert "HYPOTHESIS_PROFILE=thorough" in _recipe("test-long")
    assert "HYPOTHESIS_PROFILE" not in _recipe("test")
