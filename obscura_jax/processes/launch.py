"""Who a process is in a run of several, like torchrun / jax.distributed.

Local (one host): `obscura train ... --processes N` re-runs the same command, without
`--processes`, in N child processes (obscura_jax.processes.supervise, the launcher),
each told who it is through the environment:

    OBSCURA_COORDINATOR=127.0.0.1:<free port>    process 0 hosts the coordination service
    OBSCURA_NUM_PROCESSES=N   OBSCURA_PROCESS_ID=i
    OBSCURA_TRANSFER_ADDRESS=127.0.0.1:<free port>   CPU cross-process transfers
    OBSCURA_LOCAL_DEVICE_IDS=...                  GPU: this process's GPUs
    OBSCURA_LOG_FILE=...                          its C and C++ output (native_log)

Several hosts: run the command on each host with `--coordinator HOST:PORT
--num-processes N --process-id I` (or the OBSCURA_* variables above; flags win).

This module imports no JAX.
"""
from __future__ import annotations

import os
import random
import re
import socket
from dataclasses import dataclass

from obscura_jax.errors import UsageError
from obscura_jax.processes.native_log import ENV_LOG_FILE, default_path

ENV_COORDINATOR, ENV_NUM, ENV_ID = "OBSCURA_COORDINATOR", "OBSCURA_NUM_PROCESSES", "OBSCURA_PROCESS_ID"
ENV_TRANSFER, ENV_DEVICE_IDS = "OBSCURA_TRANSFER_ADDRESS", "OBSCURA_LOCAL_DEVICE_IDS"
ENV_STALL = "OBSCURA_STEP_STALL_SECONDS"        # ProcessSpec.step_stall
ENV_HEARTBEAT = "OBSCURA_HEARTBEAT_SECONDS"     # ProcessSpec.heartbeat_limit
ENV_CONNECT = "OBSCURA_CONNECT_SECONDS"         # ProcessSpec.connect_timeout
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
    log_file: str | None = None       # C and C++ output (obscura_jax.processes.native_log); None: a temp file
    connect_timeout: float = 20.0     # seconds to reach the coordinator (obscura_jax.processes.coordinator)
    join_timeout: float = 120.0       # seconds for every process to join

    def __post_init__(self):
        if not 0 < self.connect_timeout <= self.join_timeout:
            raise UsageError(f"the time to reach the coordinator must be in (0, {self.join_timeout:g}] s, got "
                             f"{self.connect_timeout:g} ({ENV_CONNECT})")

    @property
    def native_log(self) -> str:
        return self.log_file or default_path(self.process_id)


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
    connect = float(environ.get(ENV_CONNECT) or ProcessSpec.connect_timeout)
    return ProcessSpec(coordinator, num, pid, platform=platform, devices_per_process=devices_per_process,
                       local_device_ids=tuple(int(i) for i in ids.split(",")) if ids else None,
                       transfer_address=transfer, step_stall=stall, heartbeat_limit=heartbeat,
                       log_file=environ.get(ENV_LOG_FILE) or None, connect_timeout=connect,
                       join_timeout=max(ProcessSpec.join_timeout, connect))


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


