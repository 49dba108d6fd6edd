"""examples/geglu.py runs (a subprocess with a timeout) and passes its own check."""
import pytest

from tests.examples.helpers import run_example


@pytest.mark.slow
def test_geglu_runs_and_checks_itself(tmp_path):
    r = run_example("geglu.py", cwd=tmp_path)
    assert "every op is tagged in the traced model; none is a llama or gpt name" in r.stdout
    assert "geglu-tiny: 180,800 params" in r.stdout
