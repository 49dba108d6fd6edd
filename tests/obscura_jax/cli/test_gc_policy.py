"""obscura_jax.cli.gc_policy: the `obscura` command's process collects cycles at
BATCH_THRESHOLDS from its first line; the call itself sets exactly those."""
import gc
import subprocess
import sys

from obscura_jax.cli import gc_policy
from tests.obscura_jax.mp_helpers import ROOT


def test_for_batch_process_sets_the_thresholds():
    before = gc.get_threshold()
    try:
        gc.set_threshold(700, 10, 10)
        gc_policy.for_batch_process()
        assert gc.get_threshold() == gc_policy.BATCH_THRESHOLDS
        assert gc.isenabled()
    finally:
        gc.set_threshold(*before)


def test_the_obscura_command_runs_with_them():
    probe = subprocess.run([sys.executable, "-c", "import gc, obscura_jax.__main__; print(gc.get_threshold())"],
                           cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout.strip() == str(gc_policy.BATCH_THRESHOLDS)
