"""examples/custom_schedule.py runs (a subprocess with a timeout) and passes its own check."""
import pytest

from tests.examples.helpers import run_example


@pytest.mark.slow
def test_custom_schedule_runs_and_checks_itself(tmp_path):
    r = run_example("custom_schedule.py", "--out", str(tmp_path), cwd=tmp_path)
    assert "-> EQUAL" in r.stdout
    assert "simulated (f=1, b=2, r=1, stage 0 recomputing): 1f1b 38, early-forwards 35" in r.stdout
