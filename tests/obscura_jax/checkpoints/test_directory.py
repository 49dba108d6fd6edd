"""The checkpoint directory's lock and metrics log: a second run on a
directory stops at once naming the holder, a dead holder's record is taken over
with one warning, and the metrics log holds every step exactly once across a kill
and a resume (these two with real `obscura train` processes, bounded in time)."""
import json
import os
import random
import signal
import subprocess
import sys
import time

import pytest

from obscura_jax.checkpoints.directory import STEP_META, DirectoryLock, MetricsLog, check_unlocked, saved_process_count
from obscura_jax.errors import RunError
from tests.obscura_jax.mp_helpers import ROOT

TINY = ["train", "--model", "llama2-tiny", "--stages", "2", "--microbatches", "2", "--micro-batch-size", "1",
        "--seq-len", "16", "--devices", "cpu:2", "--no-progress", "--cost-reps", "1", "--data", "stdlib"]


def test_a_held_lock_refuses_a_second_holder_naming_the_first(tmp_path):
    lock = DirectoryLock(tmp_path)
    record = json.loads((tmp_path / ".obscura.lock").read_text())
    assert record["pid"] == os.getpid()
    for attempt in (lambda: DirectoryLock(tmp_path), lambda: check_unlocked(tmp_path)):
        with pytest.raises(RunError, match=rf"in use by another run: pid {os.getpid()} on "):
            attempt()
    lock.release()
    assert not (tmp_path / ".obscura.lock").exists()   # the run that ends removes its lock file
    check_unlocked(tmp_path)
    DirectoryLock(tmp_path).release()
    assert list(tmp_path.iterdir()) == []


def test_a_lock_file_removed_between_open_and_lock_is_taken_anew(tmp_path, monkeypatch):
    """The holder ends (removes the file, then unlocks) right after a second run opened
    the file: the second must not hold the removed file, or a third run would lock a
    new file beside it and two runs would hold the directory."""
    from obscura_jax.checkpoints import directory
    first = DirectoryLock(tmp_path)
    real_open = os.open

    def open_then_the_holder_ends(*args, **kw):
        fd = real_open(*args, **kw)
        first.release()
        return fd
    monkeypatch.setattr(directory.os, "open", open_then_the_holder_ends)
    second = DirectoryLock(tmp_path)
    monkeypatch.undo()
    with pytest.raises(RunError, match="in use by another run"):
        DirectoryLock(tmp_path)
    second.release()
    assert list(tmp_path.iterdir()) == []


def test_a_dead_holders_record_is_taken_over_with_one_warning(tmp_path, capsys):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait(timeout=60)
    import socket
    (tmp_path / ".obscura.lock").write_text(json.dumps({"pid": dead.pid, "host": socket.gethostname(),
                                                        "started": "then"}))
    lock = DirectoryLock(tmp_path)
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"left by pid {dead.pid}" in err and "no longer running" in err
    lock.release()


def test_metrics_log_cuts_back_to_the_resumed_step(tmp_path):
    log = MetricsLog(tmp_path)
    log.start(0)
    for s in (1, 2, 3):
        log.append(s, float(s), 0.1)
    log.close()
    with open(log.path, "a") as f:
        f.write('{"step": 4, "lo')          # a torn line from a kill
    assert [e["step"] for e in log.start(2)] == [1, 2]       # what a resumed run's curve starts with
    log.append(3, 30.0, 0.1)
    log.close()
    assert [(e["step"], e["loss"]) for e in log.entries()] == [(1, 1.0), (2, 2.0), (3, 30.0)]
    log.start(0)
    log.close()
    assert log.entries() == []


def _start(argv, **kw):
    return subprocess.Popen([sys.executable, "-m", "obscura_jax", *argv], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True, **kw)


def _wait_for(predicate, proc, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if proc.poll() is not None:
            raise AssertionError(f"exited early: {proc.returncode}\n{proc.stderr.read()[-2000:]}")
        if time.monotonic() > deadline:
            os.killpg(proc.pid, signal.SIGKILL)
            raise AssertionError("timed out")
        time.sleep(0.05)


def _finish(proc, timeout: float) -> tuple[int, str, str]:
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise AssertionError(f"still running after {timeout} s")
    return proc.returncode, out, err


@pytest.mark.slow
def test_the_saved_process_count_is_the_newest_steps(tmp_path):
    """Read before any process starts; None wherever the newest step's metadata does
    not read as the checkpointers write it (Orbax's own reading decides then)."""
    def step(n: int, text: str) -> None:
        (tmp_path / str(n) / STEP_META).parent.mkdir(parents=True)
        (tmp_path / str(n) / STEP_META).write_text(text)
    assert saved_process_count(tmp_path) is None          # no step
    step(2, json.dumps({"step": 2, "identity": {"model": "m", "processes": 4}}))
    step(10, json.dumps({"step": 10, "identity": {"model": "m", "processes": 2}}))
    (tmp_path / "11.orbax-checkpoint-tmp-1").mkdir()     # a save that never finished
    assert saved_process_count(tmp_path) == 2            # 10 is newer than 2 (not by name)
    step(12, json.dumps({"step": 12, "identity": {"model": "m"}}))
    assert saved_process_count(tmp_path) == 1            # written before the field: one process
    step(13, "{not json")
    assert saved_process_count(tmp_path) is None
    assert saved_process_count(tmp_path / "nosuchdir") is None


def test_two_concurrent_trains_on_one_dir(tmp_path):
    """The second exits 2 at once naming the lock's holder; the first finishes, and
    resumes correctly later. The first is stopped (SIGSTOP) while the second runs, so it
    holds the lock then however fast either runs: the second's refusal while the first
    cannot release the lock is the proof it did not wait for it (no wall-clock bound)."""
    ck = tmp_path / "ck"
    # 100 steps: the first is stopped within a poll (50 ms) of taking the lock, which it
    # takes before it compiles (seconds), so it cannot have finished by then
    first = _start(TINY + ["--steps", "100", "--checkpoint-every", "50", "--checkpoint-dir", str(ck)])
    lock = ck / ".obscura.lock"
    _wait_for(lambda: lock.exists() and lock.read_text().strip(), first, 240)
    first.send_signal(signal.SIGSTOP)
    try:
        rc, _, err = _finish(_start(TINY + ["--steps", "4", "--seed", "1", "--checkpoint-dir", str(ck)]), 300)
    finally:
        first.send_signal(signal.SIGCONT)
    assert rc == 2 and err.count("\n") == 1 and f"pid {first.pid} on " in err and "in use" in err, err
    rc, _, err = _finish(first, 600)
    assert rc == 0, err[-2000:]
    rc, _, err = _finish(_start(TINY + ["--steps", "102", "--checkpoint-dir", str(ck), "--resume"]), 300)
    assert rc == 0, err[-2000:]
    assert [e["step"] for e in MetricsLog(ck).entries()] == list(range(1, 103))


@pytest.mark.slow
def test_kill_at_a_random_step_then_resume_logs_every_step_once(tmp_path):
    ck, steps = tmp_path / "ck", 10
    killed_at = random.Random().randint(1, steps - 2)
    run = _start(TINY + ["--steps", str(steps), "--checkpoint-every", "3", "--checkpoint-dir", str(ck)])
    log = MetricsLog(ck)
    _wait_for(lambda: len(log.entries()) >= killed_at, run, 300)
    os.killpg(run.pid, signal.SIGKILL)
    run.wait()
    before = {e["step"]: e["loss"] for e in log.entries()}
    rc, out, err = _finish(_start(TINY + ["--steps", str(steps), "--checkpoint-dir", str(ck), "--resume"]), 300)
    assert rc == 0, err[-2000:]
    entries = log.entries()
    assert [e["step"] for e in entries] == list(range(1, steps + 1)), (killed_at, entries)
    raw = [json.loads(line)["step"] for line in log.path.read_text().splitlines()]
    assert raw == list(range(1, steps + 1))           # exactly once in the file itself
    for e in entries:                                   # steps logged before the kill: the same losses
        if e["step"] in before:
            assert e["loss"] == pytest.approx(before[e["step"]], rel=1e-6)
