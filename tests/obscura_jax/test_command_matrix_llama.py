"""Issue 24's command matrix on llama2-tiny (tests/obscura_jax/command_matrix.py says
what and why): every command x every schedule family, in one process; then 2
processes x 2 devices for a plain and a chunked family."""
import pytest

from tests.obscura_jax import command_matrix as cm

pytestmark = pytest.mark.slow
MODEL = "llama2-tiny"


def test_every_command_runs_every_family(tmp_path, capsys):
    cm.simulate_every_family(tmp_path, capsys)
    cm.train_every_family(MODEL, tmp_path, capsys)
    cm.compare_every_family(MODEL, tmp_path, capsys)
    assert cm.plan_then_train(MODEL, tmp_path, capsys)


@pytest.mark.parametrize("schedule", cm.PLAIN_AND_CHUNKED)
def test_two_processes(schedule, tmp_path):
    from tests.obscura_jax.mp_helpers import crash_report, run
    out = tmp_path / "run.json"
    rc, text = run(["train", "--model", MODEL, "--schedule", schedule, *cm.SHAPE, "--devices", "cpu",
                    "--processes", "2", "--devices-per-process", "2", "--no-progress", "--cost-reps", "1",
                    "--steps", "2", "--check", "--json", str(out)], timeout=300)
    assert rc == 0, crash_report(text)
    res = cm.check_train_json(out, schedule)
    assert res["processes"] == 2 and {st["process"] for st in res["stages"]} == {0, 1}
