"""The error family lives in the lowest package and loads no JAX; every package's
bad-input error belongs to it (and stays a ValueError)."""
import subprocess
import sys

import pytest

from models.errors import ModelConfigError, ObscuraError
from obscura_jax.errors import RunError, UsageError
from planner.errors import InfeasibleError, PlanError, ProfileError
from schedules.errors import ScheduleError


@pytest.mark.parametrize("error", [ModelConfigError, ScheduleError, ProfileError, PlanError, InfeasibleError,
                                   RunError, UsageError])
def test_every_package_error_is_an_obscura_error(error):
    assert issubclass(error, ObscuraError) and issubclass(error, ValueError)


def test_models_loads_its_parts_on_first_use():
    code = ("import sys, models, models.errors; assert 'jax' not in sys.modules; "
            "models.ModelConfig; assert 'jax' not in sys.modules; "
            "models.init_params; assert 'jax' in sys.modules; print('ok')")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


def test_unknown_names_are_attribute_errors():
    import models
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        models.nope  # noqa: B018
    assert sorted(models.__all__) == models.__all__ and "ObscuraError" in models.__all__
