"""examples/policy_experiment.py runs (a subprocess with a timeout), tabulates recompute
and offload policies and passes its own check."""
import pytest

from tests.examples.helpers import run_example


@pytest.mark.slow
def test_policy_experiment_runs_and_checks_itself(tmp_path):
    r = run_example("policy_experiment.py", cwd=tmp_path)
    assert "every policy the same loss and gradients: yes" in r.stdout
    assert "B): yes; every offload" in r.stdout      # full keeps the least on the device, none the most
    assert "moves bytes to the host and keeps the rest on the device: yes" in r.stdout
    rows = {line[:18].strip(): line.split() for line in r.stdout.splitlines() if line.endswith(("yes", "NO"))}
    # measured: the offload rows keep host bytes, the recompute rows none
    assert float(rows["offload gate,up"][-5]) > 0 and float(rows["cmb, offload g,u"][-5]) > 0
    assert float(rows["cmb"][-5]) == 0 and float(rows["none"][-5]) == 0
