"""The launcher of `--processes N`: start the same command N times on this host,
stream their output, and end them together.

Each child is told who it is through the environment (obscura_jax.processes.launch):

    OBSCURA_COORDINATOR=127.0.0.1:<free port>    process 0 hosts the coordination service
    OBSCURA_NUM_PROCESSES=N   OBSCURA_PROCESS_ID=i
    OBSCURA_TRANSFER_ADDRESS=127.0.0.1:<free port>   CPU cross-process transfers
    OBSCURA_LOCAL_DEVICE_IDS=...                  GPU: this process's GPUs
    OBSCURA_LOG_FILE=<run's log dir>/p<i>.log     its C and C++ output (native_log)

Their lines are streamed with a `[pI] ` prefix: error lines (`obscura: error: ...`,
`obscura: internal error ...`, `obscura: interrupted`, `obscura: terminated ...`) to
stderr, the same line from several processes once (a shared verdict), the rest to
stdout. The launcher watches every child (each poll asks all of them), and when one
fails:

- it names the process unless the process said its own error line:
  `obscura: error: process 1 of 2 ended by SIGKILL; stopping the others` (for a crash,
  with its last words, a fatal line from its log when XLA said one: `...; its last
  line: F1205 ... (its log: /tmp/obscura-run-.../p1.log)`);
- it stops the others (`stop_the_others`): at once when the process died by a
  signal (nobody told them: they would wait for it until their watchdog's heartbeat
  limit), after `grace` seconds when it exited with an error status (it published
  its line through the watchdog; the others print it and leave on their own);
- it exits with the first failure's status, 128 + n for a signal n; never 0 when
  any process failed, even when all ended before it looked.

SIGTERM to the launcher (a batch scheduler's notice) is forwarded to every child:
they stop at the end of the running step, checkpoint it and exit 143
(obscura_jax/checkpoints/stop.py); the launcher then says the run's one line in
their stead (`obscura: terminated by SIGTERM; last complete checkpoint: ...`) and
exits 143. Ctrl-C kills them
at once (130). The log directory is removed after a clean run and kept, named on
the last line, after a failed one.

This module imports no JAX: the parent only starts processes.
"""
from __future__ import annotations

import ctypes
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

from obscura_jax.cli import interrupt
from obscura_jax.processes.coordinator import check_port_free
from obscura_jax.processes.launch import (ENV_COORDINATOR, ENV_DEVICE_IDS, ENV_ID, ENV_NUM, ENV_TRANSFER,
                                          ERROR_PREFIX, free_ports)
from obscura_jax.processes.native_log import ENV_LOG_FILE, fatal_line

ERROR_LINES = (ERROR_PREFIX, "obscura: internal error", "obscura: interrupted", "obscura: terminated")
TERM_GRACE_S = 120.0    # after forwarding SIGTERM: the children end at their step's end, checkpointed
QUIET_SIGNALS = {int(s) for s in (signal.SIGKILL, signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}  # sent: no last words


def _die_with_parent() -> None:
    """Child side (Linux): get SIGKILL when the launcher dies, so no process outlives it."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)   # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def describe_exit(rc: int) -> str:
    """'ended by SIGKILL' / 'exited with status 2'."""
    return f"ended by {signal_name(-rc)}" if rc < 0 else f"exited with status {rc}"


def signal_name(n: int) -> str:
    try:
        return signal.Signals(n).name
    except ValueError:
        return f"signal {n}"


def _has_text(path: str) -> bool:
    try:
        return os.path.getsize(path) > 0
    except OSError:        # it never got as far as opening its log
        return False


def exit_status(rc: int) -> int:
    """A child's return code as a shell shows it: 128 + n for signal n."""
    return rc if rc >= 0 else 128 - rc


def _coordinator_ports(num_processes: int) -> list[int]:
    """Free ports, the coordinator's checked as JAX's service will bind it (every
    interface) right before the children start: a port another program took since
    is picked again."""
    for _ in range(5):
        ports = free_ports(num_processes + 1)
        try:
            check_port_free(f"127.0.0.1:{ports[0]}")
            return ports
        except Exception:  # noqa: BLE001  taken meanwhile: draw again
            continue
    raise OSError("no free port for the coordinator on this host")


class LocalRun:
    """N children of one run and what the launcher knows of them.
    `stop_the_others` is the one way the launcher ends the survivors."""

    def __init__(self, cmd: list[str], num_processes: int, devices_per_process: int, out, err,
                 extra_env: dict | None = None):
        self.n, self.out, self.err = num_processes, out, err
        self.log_dir = tempfile.mkdtemp(prefix="obscura-run-")
        ports = _coordinator_ports(num_processes)
        self.coordinator = f"127.0.0.1:{ports[0]}"
        flags = re.sub(r"--xla_force_host_platform_device_count=\d+", "", os.environ.get("XLA_FLAGS", "")).strip()
        self.procs = []
        for i in range(num_processes):
            ids = ",".join(str(i * devices_per_process + k) for k in range(devices_per_process))
            env = dict(os.environ, PYTHONUNBUFFERED="1", XLA_FLAGS=flags, **(extra_env or {}),
                       **{ENV_COORDINATOR: self.coordinator, ENV_NUM: str(num_processes), ENV_ID: str(i),
                          ENV_TRANSFER: f"127.0.0.1:{ports[i + 1]}", ENV_DEVICE_IDS: ids,
                          ENV_LOG_FILE: self.log_path(i)})
            self.procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                               text=True, bufsize=1, start_new_session=True,
                                               preexec_fn=_die_with_parent))
        self.lock = threading.Lock()
        self.said_error = [False] * num_processes
        self.last_line = [""] * num_processes
        self.killed: set[int] = set()          # stopped by the launcher
        self.forwarded = False                 # SIGTERM passed on: the launcher says the run's one line
        self.failures: list[int] = []          # failed processes, in the order seen
        self._errors_seen: set[str] = set()
        self._pumps = [threading.Thread(target=self._pump, args=(i,), daemon=True) for i in range(num_processes)]
        for t in self._pumps:
            t.start()

    def log_path(self, i: int) -> str:
        return os.path.join(self.log_dir, f"p{i}.log")

    def say(self, line: str, error: bool = False) -> None:
        with self.lock:
            if error:        # every process reports a shared verdict: once is enough
                text = line.split("] ", 1)[-1] if line.startswith("[p") else line
                if text in self._errors_seen:
                    return
                self._errors_seen.add(text)
            stream = self.err if error else self.out
            stream.write(line if line.endswith("\n") else line + "\n")
            stream.flush()

    def _pump(self, i: int) -> None:
        for line in self.procs[i].stdout:
            error = line.startswith(ERROR_LINES)
            self.said_error[i] = self.said_error[i] or error
            self.last_line[i] = line.strip() or self.last_line[i]
            if not (self.forwarded and line.startswith("obscura: terminated")):   # each its own words of it
                self.say(f"[p{i}] {line}", error=error)

    def running(self) -> list[int]:
        return [i for i, p in enumerate(self.procs) if p.poll() is None]    # polls every child

    def stop_the_others(self, sig: int = signal.SIGKILL) -> None:
        """Send `sig` to every child still running (its whole process group); with
        SIGKILL, they count as stopped by the launcher."""
        for i in self.running():
            if sig == signal.SIGKILL:
                self.killed.add(i)
            try:
                os.killpg(self.procs[i].pid, sig)
            except ProcessLookupError:
                pass

    def note_failures(self) -> list[int]:
        """The processes that failed since the last call (not those the launcher
        stopped), each named in a line unless it said its own error line."""
        new = [i for i, p in enumerate(self.procs)
               if p.returncode not in (None, 0) and i not in self.failures and i not in self.killed]
        for i in new:
            self.failures.append(i)
            self._pumps[i].join(2)             # its last lines first
            if not self.said_error[i]:
                self.say(ERROR_PREFIX + self.failure_text(i), error=True)
        return new

    def failure_text(self, i: int) -> str:
        """'process 1 of 2 ended by SIGKILL; stopping the others', with the last words
        of a process that crashed."""
        rc = self.procs[i].returncode
        text = f"process {i} of {self.n} {describe_exit(rc)}"
        if rc > 0 or -rc not in QUIET_SIGNALS:      # a crash: its last words, and where the rest is
            words = fatal_line(self.log_path(i)) or self.last_line[i]
            text += f"; its last line: {words[:300]}" if words else ""
            text += f" (its log: {self.log_path(i)})" if _has_text(self.log_path(i)) else ""
        others = [j for j in self.running() if j != i]
        return text + ("; stopping the others" if others else "")

    def ended_line(self) -> str:
        parts = []
        for i, p in enumerate(self.procs):
            how = "stopped by the launcher" if i in self.killed else (
                f"status {p.returncode}" if p.returncode >= 0 else signal_name(-p.returncode))
            parts.append(f"{i} {how}")
        return f"obscura: processes ended: {', '.join(parts)}; their logs: {self.log_dir}"

    def join_pumps(self) -> None:
        for t in self._pumps:
            t.join(2)


def launch_local(argv: list[str], num_processes: int, *, devices_per_process: int = 1,
                 grace: float = 4.0, out=None, err=None, command: list[str] | None = None,
                 extra_env: dict | None = None) -> int:
    """Run `command *argv` (default: `python -m obscura_jax`) as processes 0..N-1 of one
    run on this host; the exit status (module docstring)."""
    out, err = out or sys.stdout, err or sys.stderr
    cmd = [*(command or [sys.executable, "-m", "obscura_jax"]), *argv]
    interrupt.defer_sigterm(True)      # SIGTERM is forwarded to the children, not raised here
    run = LocalRun(cmd, num_processes, devices_per_process, out, err, extra_env)
    run.say(f"obscura: started {num_processes} processes (pids {', '.join(str(p.pid) for p in run.procs)}); "
            f"coordinator {run.coordinator}")
    try:
        rc = _supervise(run, grace)
    except KeyboardInterrupt:
        run.stop_the_others()
        run.join_pumps()
        with run.lock:     # the processes said nothing: one line for the run, naming its last checkpoint
            err.write(interrupt.interrupted_line(kind="SIGINT") + "\n")
            err.flush()
        shutil.rmtree(run.log_dir, ignore_errors=True)     # nothing failed: nothing to look up
        return 130
    finally:
        interrupt.defer_sigterm(False, handled=True)
    if rc == 0:
        shutil.rmtree(run.log_dir, ignore_errors=True)
    return rc


def _supervise(run: LocalRun, grace: float) -> int:
    """Watch until every child ended; the launcher's exit status.
    Long: the one loop over polling, naming, stopping and SIGTERM's forwarding."""
    stop_at = forwarded = None
    while True:
        running = run.running()
        new = run.note_failures()
        if new and stop_at is None:
            first = run.procs[run.failures[0]].returncode
            stop_at = time.monotonic() + (0.0 if first < 0 else grace)   # a signal: nobody told the others
        if not running:
            break
        if interrupt.sigterm_pending() and forwarded is None:
            forwarded, run.forwarded = time.monotonic(), True
            run.stop_the_others(signal.SIGTERM)
        # after SIGTERM's forwarding the children stop at their step's end and checkpoint: they get longer
        deadline = forwarded + TERM_GRACE_S if forwarded is not None else stop_at
        if deadline is not None and time.monotonic() >= deadline:
            run.stop_the_others()
        time.sleep(0.05)
    run.join_pumps()
    if forwarded is not None:     # one line for the run, naming its last checkpoint
        run.say(interrupt.interrupted_line(kind="SIGTERM"), error=True)
        rc = interrupt.EXIT_CODES["SIGTERM"]
    elif run.failures:
        rc = exit_status(run.procs[run.failures[0]].returncode)
    else:
        return 0
    with run.lock:
        run.err.write(run.ended_line() + "\n")
        run.err.flush()
    return rc
