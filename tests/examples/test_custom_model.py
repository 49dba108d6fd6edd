"""examples/custom_model.py runs (a subprocess with a timeout) and passes its own check."""
import pytest

from tests.examples.helpers import run_example


@pytest.mark.slow
def test_custom_model_runs_and_checks_itself(tmp_path):
    r = run_example("custom_model.py", "--out", str(tmp_path), cwd=tmp_path)
    assert "losses equal to the unpipelined model: True -> OK" in r.stdout
    assert "op names its own: True" in r.stdout
