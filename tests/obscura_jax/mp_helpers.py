"""Running the `obscura` command line with several local processes from a test:
bounded in time (the launcher's process group is killed on timeout; its children
die with it), output lines kept with the time they arrived. And starting one
`obscura` process that a test will interrupt: `start_ready` returns once its Ctrl-C
handler is installed, so a signal never lands in the interpreter's own start-up."""
from __future__ import annotations

import os
import select
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# load in every process of a run to inject the faults its environment names (faults.py)
FAULTS = ["--model-module", str(Path(__file__).resolve().parent / "faults.py")]
TINY = ["--model", "llama2-tiny", "--stages", "4", "--microbatches", "4", "--micro-batch-size", "2",
        "--seq-len", "16", "--devices", "cpu", "--no-progress", "--cost-reps", "1"]


@dataclass
class Launched:
    proc: subprocess.Popen
    started: float
    lines: list = field(default_factory=list)      # (seconds since start, line)
    reader: threading.Thread | None = None

    def text(self) -> str:
        return "".join(line for _, line in self.lines)

    def wait(self, timeout: float) -> int:
        """The launcher's exit status, once it and the reader of its output are done
        (the reader ends when every process holding the pipe has exited)."""
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            raise AssertionError(f"launcher still running after {timeout:.0f} s:\n{self.text()[-3000:]}")
        if self.reader is not None:
            self.reader.join(60)
        return rc

    def pids(self) -> list[int]:
        """The children's pids, from the launcher's first line."""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            for _, line in self.lines:
                if line.startswith("obscura: started"):
                    return [int(p) for p in line.split("(pids ")[1].split(")")[0].split(", ")]
            time.sleep(0.05)
        raise AssertionError(f"no start line:\n{self.text()}")


def remove_logs(text: str) -> None:
    """Remove the log directory a failed launch names on its last line
    (obscura_jax.processes.supervise keeps it for the user)."""
    for line in text.splitlines():
        if line.startswith("obscura: processes ended:") and "; their logs: " in line:
            shutil.rmtree(line.split("; their logs: ", 1)[1].strip(), ignore_errors=True)


def crash_report(text: str, per_process: int = 12, tail: int = 3000) -> str:
    """For a failed assertion: each process's first lines that are not native stack
    frames (where a crash starts: the tail is often only the others' fallout), then
    the output's tail."""
    firsts: dict[str, list[str]] = {}
    for line in text.splitlines():
        if line.startswith("[p") and "]" in line and "    @ " not in line:
            mine = firsts.setdefault(line.split("]", 1)[0] + "]", [])
            if len(mine) < per_process:
                mine.append(line)
    return "\n".join(line for lines in firsts.values() for line in lines) + "\n...\n" + text[-tail:]


def launch(args: list[str], env: dict | None = None) -> Launched:
    proc = subprocess.Popen([sys.executable, "-m", "obscura_jax", *args], cwd=ROOT, text=True, bufsize=1,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
                            env=dict(os.environ, **(env or {})))
    run = Launched(proc, time.monotonic())

    def read():
        for line in proc.stdout:
            run.lines.append((time.monotonic() - run.started, line))
    run.reader = threading.Thread(target=read, daemon=True)
    run.reader.start()
    return run


def run(args: list[str], timeout: float, env: dict | None = None) -> tuple[int, str]:
    launched = launch(args, env)
    rc = launched.wait(timeout)          # with the reader's last lines
    return rc, launched.text()


def start_ready(args: list[str], timeout: float = 120, **popen) -> tuple[subprocess.Popen, float]:
    """`python -m obscura_jax ARGS` in its own session, returned once it reports its
    Ctrl-C handler installed (obscura_jax.cli.interrupt.announce_ready, through a pipe),
    with the monotonic time it did; killed, and the test failed, if it does not within
    `timeout` seconds (a bound for a machine at any load, not a measurement)."""
    r, w = os.pipe()
    # PYTHONFAULTHANDLER: a process that hangs can be made to print every thread's stack
    # (stacks_of_a_hung_process) before it is killed
    env = dict(popen.pop("env", None) or os.environ, OBSCURA_TEST_READY_FD=str(w), PYTHONFAULTHANDLER="1")
    proc = subprocess.Popen([sys.executable, "-m", "obscura_jax", *args], cwd=ROOT, pass_fds=(w,), env=env,
                            start_new_session=True, **popen)
    os.close(w)
    try:
        said = os.read(r, 16) if select.select([r], [], [], timeout)[0] else b""
    finally:
        os.close(r)
    if said != b"ready\n":
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        raise AssertionError(f"no readiness line within {timeout:.0f} s (read {said!r}):\n{(err or '')[-2000:]}")
    return proc, time.monotonic()


def stacks_of_a_hung_process(proc: subprocess.Popen) -> str:
    """For a failed assertion on a process of start_ready that did not end: SIGABRT,
    which its fault handler answers with every thread's Python stack on stderr, then
    its whole session killed. Returns the stderr tail (stderr must be a text PIPE)."""
    try:
        proc.send_signal(signal.SIGABRT)
        _, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        err = "(no stacks within 60 s of SIGABRT)"
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.communicate()
    return (err or "")[-6000:]
