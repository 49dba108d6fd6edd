"""examples/profile_plan_train.py runs (a subprocess with a timeout) and passes its own check:
what holds for any measured costs (its plan comes from this machine's times)."""
import pytest

from tests.examples.helpers import run_example


@pytest.mark.slow
def test_profile_plan_train_runs_and_checks_itself(tmp_path):
    r = run_example("profile_plan_train.py", "--out", str(tmp_path), cwd=tmp_path)
    assert "losses equal to the unpipelined model: True -> OK" in r.stdout
    assert "predicted peaks never under the run's count: True" in r.stdout
    assert "fits the limit: True" in r.stdout
