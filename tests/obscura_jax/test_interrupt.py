"""obscura_jax.interrupt through the real entry point: Ctrl-C at any moment of a run,
from the imports (where `import jax` turns it into an ImportError, numpy's C API
prints it, and JAX's gc hook swallows it) to the steps, ends the process with 130 and one stderr line, never
a traceback, a silent kill (-SIGINT), a crash (SIGSEGV) or a run that goes on."""
import signal
import subprocess
import sys
import time

import pytest

from obscura_jax import interrupt
from tests.obscura_jax.mp_helpers import ROOT

TRAIN = ["train", "--model", "llama2-tiny", "--stages", "2", "--microbatches", "2", "--seq-len", "16",
         "--devices", "cpu:2", "--no-progress", "--cost-reps", "1", "--steps", "200"]


@pytest.mark.slow
@pytest.mark.parametrize("delay", [0.3, 0.6, 1.0, 1.6, 2.5])   # from the imports (and the interpreter's own start-up, which no handler covers, is over) to the steps
def test_ctrl_c_at_any_moment_exits_130_with_one_line(delay, tmp_path):
    proc = subprocess.Popen([sys.executable, "-m", "obscura_jax", *TRAIN, "--json", str(tmp_path / "r.json")],
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    time.sleep(delay)
    proc.send_signal(signal.SIGINT)
    try:
        _, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise AssertionError("train did not stop within 120 s of Ctrl-C")
    assert proc.returncode == 130, err[-2000:]
    assert err.strip().splitlines() == ["obscura: interrupted"], err[-2000:]
    assert not (tmp_path / "r.json").exists()


def test_not_installed_nothing_is_requested():
    # library use (pytest here): the flag is only set by the entry point's handler
    assert not interrupt.requested()
    interrupt.raise_if_requested()
