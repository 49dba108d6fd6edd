"""obscura_jax.cli.interrupt through the real entry point: Ctrl-C at any moment of a run,
from the imports (where `import jax` turns it into an ImportError, numpy's C API
prints it, and JAX's gc hook swallows it) to the steps, ends the process with 130 and one stderr line, never
a traceback, a silent kill (-SIGINT), a crash (SIGSEGV) or a run that goes on."""
import os
import signal
import subprocess
import sys
import time

import pytest

from obscura_jax.cli import interrupt
from obscura_jax.checkpoints.directory import MetricsLog
from tests.obscura_jax.mp_helpers import ROOT, stacks_of_a_hung_process, start_ready

TRAIN = ["train", "--model", "llama2-tiny", "--stages", "2", "--microbatches", "2", "--seq-len", "16",
         "--devices", "cpu:2", "--no-progress", "--cost-reps", "1", "--steps", "200"]


@pytest.mark.slow
@pytest.mark.parametrize("phase, delay", [("ready", 0.0), ("ready", 0.4), ("ready", 1.2), ("ready", 2.5),
                                          ("step", 0.2)])
def test_ctrl_c_at_any_moment_exits_130_with_one_line(phase, delay, tmp_path):
    """Moments are counted from a phase the process reports, never from its start (the
    interpreter's own start-up, which no handler covers, lasts as long as the machine's
    load makes it): "ready" is its Ctrl-C handler installed (then the imports and the
    compiles), "step" its first step in the metrics log (then the steps)."""
    ck = tmp_path / "ck"     # a checkpoint every 1000 steps: none is saved, the metrics log has each step
    proc, ready = start_ready([*TRAIN, "--json", str(tmp_path / "r.json"), "--checkpoint-dir", str(ck),
                               "--checkpoint-every", "1000"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        if phase == "step":
            deadline = time.monotonic() + 300
            while not MetricsLog(ck).entries():
                assert proc.poll() is None and time.monotonic() < deadline, "no first step"
                time.sleep(0.05)
            ready = time.monotonic()
        time.sleep(max(0.0, ready + delay - time.monotonic()))
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    except (subprocess.TimeoutExpired, AssertionError):
        raise AssertionError(f"train did not reach its first step, or stop within 120 s of Ctrl-C ({phase}):\n"
                             + stacks_of_a_hung_process(proc))
    assert proc.returncode == 130, err[-2000:]
    # one line, naming the last complete checkpoint (none: one every 1000 steps)
    assert err.strip().splitlines() == [f"obscura: interrupted; no complete checkpoint in {ck} yet"], err[-2000:]
    assert not (tmp_path / "r.json").exists()


@pytest.mark.slow
@pytest.mark.parametrize("processes", [1, 2])
def test_ctrl_c_names_the_last_complete_checkpoint(processes, tmp_path):
    """A checkpoint every step; Ctrl-C once step 2's is complete (its directory is
    there): one line naming the newest complete step, whose directory exists, from
    one process or from the launcher of several (which saves nothing itself)."""
    ck = tmp_path / "ck"
    argv = [*TRAIN, "--checkpoint-dir", str(ck), "--checkpoint-every", "1"]
    if processes > 1:
        argv = [*argv, "--processes", str(processes), "--devices", "cpu"]
        argv.remove("cpu:2")
        argv.remove("--devices")
    proc, _ = start_ready(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 600
        while interrupt.last_checkpoint_step(ck) is None or interrupt.last_checkpoint_step(ck) < 2:
            assert proc.poll() is None and time.monotonic() < deadline, "no second checkpoint"
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    except (subprocess.TimeoutExpired, AssertionError):
        raise AssertionError("no second checkpoint, or no end within 120 s of Ctrl-C:\n"
                             + stacks_of_a_hung_process(proc))
    assert proc.returncode == 130, err[-2000:]
    line = err.strip().splitlines()[-1]
    step = int(line.split("step ")[1].split()[0])
    assert line == (f"obscura: interrupted; last complete checkpoint: step {step} in {ck} "
                    "(continue with --resume)"), err[-2000:]
    assert step >= 2 and (ck / str(step)).is_dir()
    if processes == 1:
        assert err.strip().splitlines() == [line], err[-2000:]


def test_the_line_names_the_newest_complete_step_only(tmp_path, monkeypatch):
    monkeypatch.setattr(interrupt, "_checkpoint_dir", interrupt._UNSET)
    assert interrupt.interrupted_line() == "obscura: interrupted"          # not a train
    interrupt.note_train_argv(["train", "--steps", "3"])
    assert interrupt.interrupted_line() == "obscura: interrupted; no checkpoint saved (no --checkpoint-dir)"
    interrupt.note_train_argv(["train", f"--checkpoint-dir={tmp_path}"])
    assert interrupt.interrupted_line().endswith(f"no complete checkpoint in {tmp_path} yet")
    for name in ("2", "10", "12.orbax-checkpoint-tmp-99", "metrics.jsonl"):   # 12: still being written
        (tmp_path / name).mkdir() if not name.endswith("jsonl") else (tmp_path / name).write_text("")
    assert interrupt.last_checkpoint_step(tmp_path) == 10
    assert "last complete checkpoint: step 10 in" in interrupt.interrupted_line()
    assert interrupt.interrupted_line(kind="SIGTERM") == (f"obscura: terminated by SIGTERM; last complete "
                                                          f"checkpoint: step 10 in {tmp_path} (continue with --resume)")


def test_announce_ready_writes_once_and_hides_the_descriptor_from_children(monkeypatch):
    r, w = os.pipe()
    monkeypatch.setenv(interrupt.ENV_READY_FD, str(w))
    interrupt.announce_ready()
    assert os.read(r, 16) == b"ready\n" and os.read(r, 16) == b""     # written, then closed
    os.close(r)
    assert interrupt.ENV_READY_FD not in os.environ                   # a child would not write to fd w
    interrupt.announce_ready()                                         # without the variable: nothing


def test_not_installed_nothing_is_requested():
    # library use (pytest here): the flag is only set by the entry point's handler
    assert not interrupt.requested()
    interrupt.raise_if_requested()


# Run in a subprocess: the handler is installed and SIGINT is really sent again.
# `exec_module` below is importlib's ExtensionFileLoader.exec_module itself, given a
# stand-in for the C extension's init (which calls back into Python, as jaxlib's does).
_DEFERRED = """
import os, signal, sys, time, types
from importlib.machinery import ExtensionFileLoader
from obscura_jax.cli import interrupt
from obscura_jax.checkpoints.directory import MetricsLog
interrupt.install()
seen = []
def init(module):                       # the extension's set-up, calling Python
    os.kill(os.getpid(), getattr(signal, sys.argv[1]))
    for _ in range(30):
        time.sleep(0.01)                # the handler runs in here: it must not raise
    seen.append(interrupt.in_extension_init(sys._getframe()))
bootstrap = types.SimpleNamespace(_call_with_frames_removed=lambda f, *a: f(*a),
                                  _verbose_message=lambda *a: None)
exec_module = types.FunctionType(ExtensionFileLoader.exec_module.__code__,
                                 {"_bootstrap": bootstrap, "_imp": types.SimpleNamespace(exec_dynamic=init)})
try:                                    # the re-sent SIGINT may come as soon as init returns
    exec_module(types.SimpleNamespace(name="fake", path="fake.so"), None)
    time.sleep(60)
    print("not raised")
except KeyboardInterrupt:
    print("raised after init" if seen else "raised in init")
print("init saw", seen, interrupt.requested(), interrupt.in_extension_init(sys._getframe()), flush=True)
"""


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
def test_ctrl_c_while_an_extension_initialises_is_raised_once_it_has(sig):
    """Raising into an extension's module init can abort the process (jaxlib: SIGABRT,
    seen under load): the handler defers there, and the interrupt arrives after (SIGTERM
    as Terminated, a KeyboardInterrupt)."""
    r = subprocess.run([sys.executable, "-c", _DEFERRED, sig], cwd=ROOT, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.splitlines() == ["raised after init", "init saw [True] True False"], r.stdout + r.stderr


# After Ctrl-C, what the libraries say of being cut short is not printed: Orbax's
# logged traceback, an asyncio loop's failing __del__, a thread's unwinding.
_QUIET_AFTER = """
import logging, os, signal, threading
from obscura_jax.cli import interrupt
interrupt.install()
logging.getLogger("absl").error("before: shown")
class Noisy:
    def __del__(self):
        raise ValueError("before: shown")
Noisy()
try:
    os.kill(os.getpid(), signal.SIGINT)
    threading.Event().wait(60)
except KeyboardInterrupt:
    pass
logging.getLogger("absl").error("after: not shown")
Noisy()
t = threading.Thread(target=lambda: 1 / 0)
t.start()
t.join()
print("done", interrupt.requested(), flush=True)
"""


def test_after_ctrl_c_library_logs_and_teardown_errors_are_not_printed():
    r = subprocess.run([sys.executable, "-c", _QUIET_AFTER], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout == "done True\n", r.stdout + r.stderr
    assert r.stderr.count("before: shown") == 2 and "after" not in r.stderr and "ZeroDivision" not in r.stderr, r.stderr
