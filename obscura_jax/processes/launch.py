"""Starting a run on several processes, like torchrun / jax.distributed.

Local (one host): `obscura train ... --processes N` re-runs the same command, without
`--processes`, in N child processes, each told who it is through the environment:

    OBSCURA_COORDINATOR=127.0.0.1:<free port>    process 0 hosts the coordination service
    OBSCURA_NUM_PROCESSES=N   OBSCURA_PROCESS_ID=i
    OBSCURA_TRANSFER_ADDRESS=127.0.0.1:<free port>   CPU cross-process transfers
    OBSCURA_LOCAL_DEVICE_IDS=...                  GPU: this process's GPUs

and streams their output, each line prefixed `[pI] `: error lines (`obscura: error: ...`,
`obscura: internal error ...`) go to stderr, the same line from several processes
once (a shared verdict), the rest to stdout. When one fails (exits non-zero or is
killed) it gives the others `grace` seconds to stop on their own (their watchdogs
print why), kills what is left, and exits with the first failure's status (never 0
when a process failed, even when all ended before the launcher looked). A process
that failed without an error line of its own gets one on stderr from the launcher,
naming it, its exit and its last line of output.

Several hosts: run the command on each host with `--coordinator HOST:PORT
--num-processes N --process-id I` (or the OBSCURA_* variables above; flags win).

This module imports no JAX: the parent only starts processes.
"""
from __future__ import annotations

import ctypes
import os
import random
import re
import signal
import socket
import subprocess
import sys
import threading
import time

from dataclasses import dataclass

from obscura_jax.cli import interrupt
from obscura_jax.errors import UsageError

ENV_COORDINATOR, ENV_NUM, ENV_ID = "OBSCURA_COORDINATOR", "OBSCURA_NUM_PROCESSES", "OBSCURA_PROCESS_ID"
ENV_TRANSFER, ENV_DEVICE_IDS = "OBSCURA_TRANSFER_ADDRESS", "OBSCURA_LOCAL_DEVICE_IDS"
ENV_STALL = "OBSCURA_STEP_STALL_SECONDS"        # ProcessSpec.step_stall
ENV_HEARTBEAT = "OBSCURA_HEARTBEAT_SECONDS"     # ProcessSpec.heartbeat_limit
ERROR_PREFIX = "obscura: error: "


@dataclass(frozen=True)
class ProcessSpec:
    """How one process joins a multi-process run (obscura_jax.processes.distributed.join)."""
    coordinator: str                  # HOST:PORT of process 0's coordination service
    num_processes: int
    process_id: int
    platform: str = "auto"            # cpu | gpu | auto (GPUs if any)
    devices_per_process: int = 1      # CPU: emulated devices of this process
    local_device_ids: tuple[int, ...] | None = None   # GPU: which of the host's GPUs are ours
    transfer_address: str | None = None    # CPU: IP:PORT of this process's transfer socket
    heartbeat_limit: float = 15.0     # seconds without a peer's heartbeat before it is lost
    step_stall: float = 30.0          # a step may take max(this, 5 x the slowest step) before "stuck"
    setup_stall: float = 600.0        # compiling, measuring, checkpointing: seconds before "stuck"


def _int(value, what: str) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        raise UsageError(f"{what} must be an integer, got {value!r}") from None


def process_spec(coordinator: str | None, num_processes, process_id, *, devices: str | None,
                 devices_per_process: int = 1, environ=os.environ) -> ProcessSpec | None:
    """This process's place in a multi-process run, from flags (which win) and the
    OBSCURA_* environment; None for a single-process run."""
    coordinator = coordinator or environ.get(ENV_COORDINATOR)
    num = num_processes if num_processes is not None else environ.get(ENV_NUM)
    pid = process_id if process_id is not None else environ.get(ENV_ID)
    if coordinator is None and num is None and pid is None:
        return None
    if None in (coordinator, num, pid):
        raise UsageError("several processes need all of --coordinator HOST:PORT, --num-processes N and "
                         f"--process-id I (or {ENV_COORDINATOR}, {ENV_NUM}, {ENV_ID})")
    num, pid = _int(num, "--num-processes"), _int(pid, "--process-id")
    if num < 1 or not 0 <= pid < num:
        raise UsageError(f"--process-id must be in 0..{num - 1} for --num-processes {num}, got {pid}")
    if not re.fullmatch(r"\[?[\w.:-]+\]?:\d+", coordinator):
        raise UsageError(f"--coordinator must be HOST:PORT, got {coordinator!r}")
    if num == 1:
        return None
    platform = {None: "auto", "cpu": "cpu", "gpu": "gpu"}.get(devices)
    if platform is None:
        raise UsageError(f"with several processes --devices is cpu or gpu (got {devices!r}); give each "
                         "process's device count with --devices-per-process K")
    if devices_per_process < 1:
        raise UsageError(f"--devices-per-process must be >= 1, got {devices_per_process}")
    ids = environ.get(ENV_DEVICE_IDS)
    transfer = environ.get(ENV_TRANSFER) or _transfer_address(coordinator)
    stall = float(environ.get(ENV_STALL) or ProcessSpec.step_stall)
    heartbeat = float(environ.get(ENV_HEARTBEAT) or ProcessSpec.heartbeat_limit)
    return ProcessSpec(coordinator, num, pid, platform=platform, devices_per_process=devices_per_process,
                       local_device_ids=tuple(int(i) for i in ids.split(",")) if ids else None,
                       transfer_address=transfer, step_stall=stall, heartbeat_limit=heartbeat)


def _transfer_address(coordinator: str) -> str:
    """This host's address toward the coordinator, with a free port (CPU transfers)."""
    host = coordinator.rsplit(":", 1)[0].strip("[]")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect((host, 9))            # no packet is sent: this only picks the route
            ip = s.getsockname()[0]
        except OSError:
            ip = "127.0.0.1"
    return f"{ip}:{free_ports(1, ip)[0]}"


def free_ports(n: int, host: str = "127.0.0.1") -> list[int]:
    """n distinct free TCP ports (held open together, so they differ), drawn at
    random below the kernel's ephemeral range: a port the kernel hands out to
    bind(0) was often just released by another run on this host, whose surviving
    peers may still send to it (JAX's CPU transfer server aborts on a foreign
    packet), and outgoing connections take their source ports from that range."""
    low = _ephemeral_low()
    pick = random.SystemRandom()
    socks = []
    try:
        for attempt in range(50 * n):
            if len(socks) == n:
                break
            s = socket.socket()
            try:
                s.bind((host, pick.randrange(10000, low) if attempt < 40 * n else 0))
            except OSError:
                s.close()
                continue
            socks.append(s)
        if len(socks) < n:
            raise OSError(f"no {n} free TCP ports on {host}")
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _ephemeral_low() -> int:
    """The lowest port of this host's ephemeral range (Linux's default when unknown)."""
    try:
        low = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    return max(low, 10001)


def without_flag(argv: list[str], flag: str) -> list[str]:
    """argv without `flag VALUE` / `flag=VALUE`."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a == flag:
            skip = True
        elif not a.startswith(flag + "="):
            out.append(a)
    return out


def _die_with_parent() -> None:
    """Child side (Linux): get SIGKILL when the launcher dies, so no process outlives it."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)   # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def describe_exit(rc: int) -> str:
    if rc < 0:
        try:
            return f"was killed by {signal.Signals(-rc).name}"
        except ValueError:
            return f"was killed by signal {-rc}"
    return f"exited with status {rc}"


ERROR_LINES = (ERROR_PREFIX, "obscura: internal error", "obscura: interrupted")


def launch_local(argv: list[str], num_processes: int, *, devices_per_process: int = 1,
                 grace: float = 30.0, out=None, err=None, command: list[str] | None = None,
                 extra_env: dict | None = None) -> int:
    """Run `command *argv` (default: `python -m obscura_jax`) as processes 0..N-1 of one
    run on this host.
    Long: start, stream, watch for the first failure, stop the rest, one exit code."""
    out, err = out or sys.stdout, err or sys.stderr
    ports = free_ports(num_processes + 1)
    cmd = [*(command or [sys.executable, "-m", "obscura_jax"]), *argv]
    flags = re.sub(r"--xla_force_host_platform_device_count=\d+", "", os.environ.get("XLA_FLAGS", "")).strip()
    procs = []
    for i in range(num_processes):
        env = dict(os.environ, PYTHONUNBUFFERED="1", XLA_FLAGS=flags, **(extra_env or {}),
                   **{ENV_COORDINATOR: f"127.0.0.1:{ports[0]}", ENV_NUM: str(num_processes), ENV_ID: str(i),
                      ENV_TRANSFER: f"127.0.0.1:{ports[i + 1]}",
                      ENV_DEVICE_IDS: ",".join(str(i * devices_per_process + k) for k in range(devices_per_process))})
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                      bufsize=1, start_new_session=True, preexec_fn=_die_with_parent))
    lock = threading.Lock()
    said_error = [False] * num_processes
    last_line = [""] * num_processes
    errors_seen: set[str] = set()

    def say(line: str, error: bool = False) -> None:
        with lock:
            if error:        # every process reports a shared verdict: once is enough
                if line.split("] ", 1)[-1] in errors_seen:
                    return
                errors_seen.add(line.split("] ", 1)[-1])
            stream = err if error else out
            stream.write(line if line.endswith("\n") else line + "\n")
            stream.flush()

    say(f"obscura: started {num_processes} processes (pids {', '.join(str(p.pid) for p in procs)}); "
        f"coordinator 127.0.0.1:{ports[0]}")

    def pump(i: int, proc) -> None:
        for line in proc.stdout:
            error = line.startswith(ERROR_LINES)
            said_error[i] = said_error[i] or error
            last_line[i] = line.strip() or last_line[i]
            say(f"[p{i}] {line}", error=error)

    pumps = [threading.Thread(target=pump, args=(i, p), daemon=True) for i, p in enumerate(procs)]
    for t in pumps:
        t.start()
    killed: set[int] = set()

    def kill_all() -> None:
        for i, p in enumerate(procs):
            if p.poll() is None:
                killed.add(i)
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass

    first, named = None, set()

    def name_failures() -> None:
        """One stderr line for each failed process that said no error line itself."""
        for i, p in enumerate(procs):
            if p.returncode not in (None, 0) and i not in named and i not in killed:
                pumps[i].join(2)             # its last lines first
                named.add(i)
                if not said_error[i]:
                    tail = f"; its last line: {last_line[i][:300]}" if last_line[i] else "; it printed nothing"
                    say(f"{ERROR_PREFIX}process {i} {describe_exit(p.returncode)}{tail}"
                        + ("; stopping the others" if any(q.poll() is None for q in procs) else ""), error=True)

    try:
        while True:
            running = any(p.poll() is None for p in procs)
            for i, p in enumerate(procs):
                if p.returncode not in (None, 0) and first is None:
                    first = (i, p.returncode, time.monotonic())
            name_failures()
            if not running:
                break
            if first is not None and time.monotonic() - first[2] > grace:
                kill_all()
            time.sleep(0.05)
    except KeyboardInterrupt:
        kill_all()
        with lock:     # the processes said nothing: one line for the run, naming its last checkpoint
            err.write(interrupt.interrupted_line() + "\n")
            err.flush()
        return 130
    finally:
        for t in pumps:
            t.join(2)
    if first is None:
        return 0
    with lock:
        err.write("obscura: processes ended: "
                  + ", ".join(f"{i} {_short_exit(p.returncode)}" for i, p in enumerate(procs)) + "\n")
        err.flush()
    rc = first[1]
    return rc if rc > 0 else 128 - rc


def _short_exit(rc: int) -> str:
    if rc >= 0:
        return f"status {rc}"
    try:
        return signal.Signals(-rc).name
    except ValueError:
        return f"signal {-rc}"
