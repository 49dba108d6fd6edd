"""examples/policy_experiment.py runs (a subprocess with a timeout) and passes its own check."""
import pytest

from tests.examples.helpers import run_example


@pytest.mark.slow
def test_policy_experiment_runs_and_checks_itself(tmp_path):
    r = run_example("policy_experiment.py", cwd=tmp_path)
    assert "every policy the same loss and gradients: yes" in r.stdout
    assert "B): yes; every policy" in r.stdout      # full keeps the least, none the most
