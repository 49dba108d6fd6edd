"""Several processes on jax.distributed: joining, collectives over the coordination
service's key-value store, the watchdog, clock offsets, and how a process ends.

Each process (one or several devices) joins with `join(spec)` before JAX starts a
backend, in this order (each found necessary on CPU processes; the reasons beside):

    1. C and C++ output to the process's log file (obscura_jax.processes.native_log)
    2. CPU: the number of local devices and this process's cross-process transfer
       socket (`jax_cross_host_transfer_socket_address`: a config value, read when the
       backend starts; an environment variable is not read, and port 0 hangs); JAX's
       preemption service off: it would take SIGTERM from our handler (which stops
       at a step's end, checkpointed: obscura_jax/checkpoints/stop.py) and let the run
       go on
    3. jax.distributed.initialize, its coordinator checked first and its wait bounded
       by a line of ours (obscura_jax.processes.coordinator); jax's own heartbeat is
       only a backstop, longer than the watchdog's limit
    4. the watchdog (obscura_jax.processes.watchdog), then the clock offset to process 0

`DistributedGroup` is the ProcessGroup the trainer uses: every collective publishes
JSON under a name drawn from a counter (aligned, since every process calls the
collectives in the same order) and reads everyone's value with a bound. The key-value
client is jax's own (`jax._src.distributed.global_state.client`, the only handle
jax 0.10-0.11 give to it).
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import pickle
import sys
import threading
import time
import traceback
from models.errors import ObscuraError
from obscura_jax.cli import interrupt
from obscura_jax.errors import RunError, UsageError, error_line
from obscura_jax.processes import native_log
from obscura_jax.processes.coordinator import JoinDeadline, check_port_free
from obscura_jax.processes.launch import ProcessSpec
from obscura_jax.processes.process_group import ProcessGroup
from obscura_jax.processes.watchdog import Watchdog

COLLECTIVE_TIMEOUT_S = 900      # a bound on any wait for a peer; the watchdog is the fast path
CLOCK_ROUNDS = 30


def join(spec: ProcessSpec) -> "DistributedGroup":
    """Join the run (must precede any JAX computation in this process)."""
    import jax  # lazy: the command line chooses devices before JAX starts
    from jax._src.distributed import global_state  # lazy: as above

    if spec.process_id == 0:
        check_port_free(spec.coordinator)
    try:
        native_log.divert(spec.native_log)
    except OSError as e:
        raise UsageError(f"cannot write the process's log {spec.native_log} ({e.strerror}): set "
                         f"{native_log.ENV_LOG_FILE} to a writable path") from None
    if spec.platform in ("cpu", "auto"):
        jax.config.update("jax_num_cpu_devices", spec.devices_per_process)
        if spec.transfer_address:
            jax.config.update("jax_cross_host_transfer_socket_address", spec.transfer_address)
    if spec.platform == "cpu":
        jax.config.update("jax_platforms", "cpu")
    jax.config.update("jax_enable_preemption_service", False)
    with JoinDeadline(spec.coordinator, spec.process_id, spec.num_processes, reach=spec.connect_timeout,
                      join=spec.join_timeout):
        jax.distributed.initialize(spec.coordinator, spec.num_processes, spec.process_id,
                                   local_device_ids=list(spec.local_device_ids) if spec.local_device_ids else None,
                                   cluster_detection_method="deactivate",
                                   initialization_timeout=int(spec.join_timeout) + 30,   # ours speaks first
                                   heartbeat_timeout_seconds=int(4 * spec.heartbeat_limit),
                                   shutdown_timeout_seconds=30)
    group = DistributedGroup(global_state.client, spec)
    group.clock_offset = group.measure_clock_offset()
    return group


class DistributedGroup(ProcessGroup):
    def __init__(self, client, spec: ProcessSpec):
        self.client = client
        self.spec = spec
        self.rank = spec.process_id
        self.size = spec.num_processes
        self.clock_offset = 0.0
        self._count = 0
        self._waiting = ""
        self._transport = None
        self._slowest_step = 0.0
        self.watchdog = Watchdog(client, self.rank, self.size, limit=spec.heartbeat_limit,
                                 allow=spec.setup_stall, waiting_on=self.waiting_on).start()

    def owns(self, device) -> bool:
        return device.process_index == self.rank

    def transport(self, stage_devices, boundary_specs, boundary_bytes, shardings=None):
        from obscura_jax.processes.cross_process import CrossProcessTransport  # lazy: starts JAX's transfer path
        self._transport = CrossProcessTransport(stage_devices, boundary_specs, boundary_bytes, self.rank,
                                                shardings=shardings)
        return self._transport

    def waiting_on(self) -> str:
        """'' or what this process waits for from another one (the watchdog's view)."""
        if self._waiting:
            return self._waiting
        return self._transport.waiting_on() if self._transport is not None else ""

    # ---- collectives ------------------------------------------------------------------
    def _name(self, name: str) -> str:
        self._count += 1
        return f"obscura/c/{self._count}/{name}"

    def _get(self, key: str, what: str) -> str:
        self._waiting = what
        try:
            return self.client.blocking_key_value_get(key, COLLECTIVE_TIMEOUT_S * 1000)
        finally:
            self._waiting = ""

    def gather(self, name: str, value) -> list:
        key = self._name(name)
        self.client.key_value_set(f"{key}/{self.rank}", json.dumps(value))
        return [json.loads(self._get(f"{key}/{p}", f"waiting for {name} from process {p}"))
                for p in range(self.size)]

    def gather_bytes(self, name: str, data: bytes) -> list[bytes] | None:
        key = self._name(name)
        self.client.key_value_set_bytes(f"{key}/{self.rank}", data)
        out = None
        if self.is_leader:
            out = [self.client.blocking_key_value_get_bytes(f"{key}/{p}", COLLECTIVE_TIMEOUT_S * 1000)
                   for p in range(self.size)]
        self.barrier(f"{name}-read")
        return out

    def barrier(self, name: str) -> None:
        self._waiting = f"waiting at {name} for the other processes"
        try:
            self.client.wait_at_barrier(self._name(name), COLLECTIVE_TIMEOUT_S * 1000)
        finally:
            self._waiting = ""

    def agree(self, name: str, digest: str, summary: str) -> None:
        theirs = self.gather(f"agree-{name}", [digest, summary])
        # Everyone has read every digest before anyone acts on the verdict: process 0
        # hosts the service, and others' reads would fail if it left first.
        self.barrier(f"agreed-{name}")
        odd = [p for p in range(self.size) if theirs[p][0] != theirs[0][0]]
        if odd:
            p = odd[0]
            raise RunError(f"process {p} runs a different {name} than process 0 ({theirs[p][1]} vs "
                           f"{theirs[0][1]}): every process must run the same command")

    # ---- clock ------------------------------------------------------------------------
    def measure_clock_offset(self) -> float:
        """Seconds to add to this process's perf_counter to read process 0's: NTP-style
        ping-pong through the key-value store, the round with the shortest round trip
        (error <= half of it, kept as clock_offset_error; ~0.05 ms on one idle host)."""
        key = self._name("clock")
        self.barrier("clock")
        if self.rank == 0:
            servers = [threading.Thread(target=self._serve_clock, args=(key, p), daemon=True)
                       for p in range(1, self.size)]
            for t in servers:
                t.start()
            for t in servers:
                t.join()
            return 0.0
        best = None
        for i in range(CLOCK_ROUNDS):
            t1 = time.perf_counter()
            self.client.key_value_set(f"{key}/{self.rank}/ping/{i}", "1")
            t0 = float(self._get(f"{key}/{self.rank}/pong/{i}", "waiting for process 0's clock"))
            t2 = time.perf_counter()
            if best is None or t2 - t1 < best[1]:
                best = (t0 - (t1 + t2) / 2, t2 - t1)
        self.clock_offset_error = best[1] / 2
        return best[0]

    def _serve_clock(self, key: str, peer: int) -> None:
        for i in range(CLOCK_ROUNDS):
            self.client.blocking_key_value_get(f"{key}/{peer}/ping/{i}", COLLECTIVE_TIMEOUT_S * 1000)
            self.client.key_value_set(f"{key}/{peer}/pong/{i}", repr(time.perf_counter()))

    # ---- the run's life ---------------------------------------------------------------
    def progress(self, what: str, step_seconds: float | None = None) -> None:
        """Steps are due within max(step_stall, 5 x the slowest step so far), anything
        else within setup_stall: a hung process is named within a minute in steady state."""
        if step_seconds is None:
            self.watchdog.progress(what, self.spec.setup_stall)
            return
        self._slowest_step = max(self._slowest_step, step_seconds)
        self.watchdog.progress(what, max(self.spec.step_stall, 5 * self._slowest_step))

    def finish(self) -> None:
        """A clean end: leave together (process 0's service must outlive the others' reads)."""
        import jax  # lazy: loaded already; kept local like join's

        self.barrier("end")
        self.watchdog.finish()
        jax.distributed.shutdown()

    def fail(self, error: BaseException) -> None:
        """Stop every process with one line, never returning. A run error (bad input, a
        different command, a NaN loss) is the same on every process: its own line. Any
        other error (a transfer that failed, a bug) is usually a lost peer's doing: give
        the heartbeats time to name it, else name this process."""
        if isinstance(error, ObscuraError):
            self.watchdog.abort(error_line(error), 2)
        if isinstance(error, interrupt.Terminated):     # SIGTERM (checkpoints/stop.py): 143, naming who got it
            who = error.who or (self.rank,)
            named = ("every process" if len(who) == self.size else
                     f"process{'es' if len(who) > 1 else ''} {', '.join(map(str, who))} of {self.size}")
            self.watchdog.abort(f"{named} got SIGTERM{interrupt.checkpoint_note()}", interrupt.EXIT_CODES["SIGTERM"],
                                heading="terminated")
        if isinstance(error, KeyboardInterrupt):
            self.watchdog.abort(f"process {self.rank} was interrupted", 130)
        deadline = time.monotonic() + self.spec.heartbeat_limit + 2 * self.watchdog.period
        while time.monotonic() < deadline:
            verdict = self.watchdog.lost_peer()
            if verdict:
                self.watchdog.abort(verdict, 17)
            time.sleep(self.watchdog.period / 2)
        traceback.print_exception(error, file=sys.stderr)
        self.watchdog.abort(f"process {self.rank} failed: {type(error).__name__}: {error_line(error)} "
                            f"(its C++ log: {self.spec.native_log})", 1)


def run_distributed(spec: ProcessSpec, body) -> int:
    """join, then body(group) -> exit code; an error in it stops every process."""
    group = join(spec)
    try:
        code = body(group)
    except BaseException as e:  # noqa: BLE001  every error ends all processes the same way
        group.fail(e)
        raise   # not reached: fail() ends the process
    group.finish()
    if spec.log_file is None:      # a log of our own choosing (several hosts): nothing failed, nothing to keep
        with contextlib.suppress(OSError):
            os.remove(spec.native_log)
    return code


def gather_params(outcome, group: ProcessGroup) -> dict | None:
    """The whole model's params (unit name -> tree of numpy arrays) on the leader,
    from every process's own stages; None on the others. Through the key-value
    store: meant for small models (checks, tests)."""
    buf = io.BytesIO()
    pickle.dump(outcome.stage_params(), buf)
    parts = group.gather_bytes("params", buf.getvalue())
    if parts is None:
        return None
    out = {}
    for part in parts:
        out.update(pickle.loads(part))
    return out
