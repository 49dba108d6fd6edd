"""`obscura profile`: bad input is one line, exit 2, no traceback, nothing written;
every flag is checked before JAX starts measuring. (The measuring
itself is tested in tests/obscura_jax/profiling/test_profiler.py and test_plan.py.)"""
import pytest

from tests.obscura_jax.cli.commands import badinput

P = ["profile", "--model", "llama2-tiny", "--seq-len", "16", "--json", "{tmp}/p.json"]
BAD = [
    (P + ["--p2p-bandwidth", "0"], "--p2p-bandwidth must be a finite number of bytes/s > 0, got 0.0"),
    (P + ["--host-bandwidth", "-1"], "--host-bandwidth must be a finite number of bytes/s > 0"),
    (P + ["--host-bandwidth", "nan"], "--host-bandwidth must be a finite"),
    (P + ["--reps", "0"], "--reps must be >= 1"),
    (P + ["--micro-batch", "0"], "--micro-batch must be >= 1"),
    (P + ["--layers", "-2"], "--layers must be >= 1"),
    (["profile", "--model", "llama2-tiny", "--seq-len", "0", "--json", "{tmp}/p.json"], "--seq-len must be >= 1"),
    (["profile", "--model", "llama2-tiny", "--seq-len", "16", "--json", "/proc/p.json"],
     "--json /proc/p.json: cannot write there"),
    (["profile", "--model", "llama2-tiny", "--seq-len", "16"], "the following arguments are required: --json"),
    (P + ["--attention", "flash"], "obscura profile: error: argument --attention: invalid choice"),
    (["profile", "--model", "nosuch", "--seq-len", "16", "--json", "{tmp}/p.json", "--analytic", "H200"],
     "nosuch"),
]


@pytest.mark.parametrize("argv,needle", BAD, ids=[" ".join(a[5:])[:50] for a, _ in BAD])
def test_bad_inputs_are_one_line_and_exit_2(capsys, tmp_path, monkeypatch, argv, needle):
    badinput.check(capsys, tmp_path, monkeypatch, argv, needle)
