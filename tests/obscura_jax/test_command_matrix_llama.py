"""The command matrix on llama2-tiny (tests/obscura_jax/command_matrix.py says
what and why): every command x every schedule family, in one process; then 2
processes x 2 devices for a plain family (1f1b); simulate (it takes no model) runs here only."""
import pytest

from tests.obscura_jax import command_matrix as cm

pytestmark = pytest.mark.slow
MODEL = "llama2-tiny"


def test_every_command_runs_every_family(tmp_path, capsys):
    cm.simulate_every_family(tmp_path, capsys)
    cm.train_each_kind(MODEL, tmp_path, capsys)
    cm.compare_every_family(MODEL, tmp_path, capsys)
    assert cm.plan_then_train(MODEL, tmp_path, capsys)


def test_two_processes(tmp_path):
    cm.train_on_two_processes(MODEL, "1f1b", tmp_path)
