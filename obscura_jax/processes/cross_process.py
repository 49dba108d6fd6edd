"""Messages between stages of different processes: JAX's cross-process
`jax.device_put` (multi-controller JAX; NCCL send/recv inside XLA on GPUs, a socket
on CPUs), not a home-made transport.

The rule that shapes everything here (verified with CPU processes):
the XLA client keys each cross-process transfer by a per-process counter, so EVERY
process must issue EVERY cross-process transfer, in the SAME order; a process that
skips one, or swaps two, silently receives another transfer's data or hangs. So:

    plan      the cross-process messages, each right after its producer in the
              global issue order (messages.transfer_plan; hashed and compared
              across processes at start-up)
    one transfer thread per process walks the plan every step:
        sender      takes the produced array from its outbox and puts it
        receiver    puts a placeholder (an array with the message's shape on the
                    sender's device, no local data) and hands the result, a future,
                    to the consumer's inbox
        third       puts the placeholder and drops the result (keeps its counter)
    workers   never issue cross-process transfers (two threads would race for keys)

Why it cannot deadlock: the transfer thread waits only for messages local workers
produce; to produce one, a worker needs only inputs whose transfers come earlier in
the plan (the plan follows a topological order). Receives wait on nothing local,
and are asynchronous once both processes have transferred once, hence `warm_up`.
In-process messages keep the in-process path (they take no transfer key). One cost:
the transfer thread takes sends in plan order, so while a worker is blocked
dispatching to a full device queue, receives for this process's other devices that
come later in the plan wait behind its pending send (never with one device per
process).
"""
from __future__ import annotations

import statistics
import time

import jax

from obscura_jax.runtime.messages import Message, transfer_plan
from obscura_jax.runtime.transport import Mailbox, Transport


class CrossProcessTransport(Transport):
    def __init__(self, stage_devices, boundary_specs, boundary_bytes, rank: int, *, shardings=None):
        super().__init__(stage_devices, boundary_bytes, shardings)
        self.rank = rank
        self.process_of = [d.process_index for d in self.stage_devices]
        self.specs = list(boundary_specs)
        self.plan: list[Message] = []
        self.outbox = Mailbox(self.abort)
        self._received: dict = {}

    def set_order(self, order, routes) -> None:
        """The plan for a (new) global issue order."""
        self.plan = transfer_plan(order, routes, self.process_of)

    def is_local(self, stage: int) -> bool:
        return self.process_of[stage] == self.rank

    # ---- a step ---------------------------------------------------------------------
    def start_step(self, ledger=None) -> None:
        super().start_step(ledger)
        self.outbox = Mailbox(self.abort)
        self._received = {}

    def step_threads(self) -> list:
        return [self._transfer_all] if self.plan else []

    def fail_step(self) -> None:
        super().fail_step()
        self.outbox.wake()

    def finish_step(self) -> list:
        return super().finish_step() + self.outbox.keys()

    # ---- messages ---------------------------------------------------------------------
    def send(self, msg: Message, value) -> None:
        if self.is_local(msg.dst):
            super().send(msg, value)
        else:
            self.outbox.put(msg, value)          # the transfer thread puts it, in plan order

    def _placeholder(self, stage: int, spec):
        """Stands for an array on another process's device: shape and dtype only."""
        return jax.make_array_from_single_device_arrays(spec.shape, self._shardings[stage], [],
                                                        dtype=spec.dtype)

    def _put(self, value, src: int, dst: int, spec):
        """One cross-process device_put from stage src's device to stage dst's: every
        process calls it, with the real array on the sender, a placeholder elsewhere."""
        if not self.is_local(src):
            value = self._placeholder(src, spec)
        return jax.device_put(value, self._shardings[dst])

    def _transfer_all(self) -> None:
        for msg in self.plan:
            value = self.outbox.take(msg) if self.is_local(msg.src) else None
            y = self._put(value, msg.src, msg.dst, self.specs[msg.boundary])
            if self.is_local(msg.dst):
                self._received[msg] = y
                self.deliver(msg, y)

    def waiting_on(self) -> str:
        for msg in sorted(self.inbox.waiting):
            if not self.is_local(msg.src):
                return f"waiting for {msg} from process {self.process_of[msg.src]}"
        for msg, y in list(self._received.items()):
            if not y.is_ready():
                return f"waiting for the data of {msg} from process {self.process_of[msg.src]}"
        return ""

    # ---- start-up and measurement -------------------------------------------------------
    def warm_up(self) -> None:
        """One tiny transfer per communicating pair of processes, in a fixed order: a
        process's first cross-process transfer starts its transfer server, and a
        receiver's first call blocks until the sender's server is up (~2 s once)."""
        pairs = sorted({(m.src, m.dst) for m in self.plan},
                       key=lambda sd: (self.process_of[sd[0]], self.process_of[sd[1]], sd))
        seen = set()
        for src, dst in pairs:
            key = (self.process_of[src], self.process_of[dst])
            if key in seen:
                continue
            seen.add(key)
            # one row per data shard on both sides (a stage mesh splits dim 0 over data)
            n = _data_size(self._shardings[src]) * _data_size(self._shardings[dst])
            tiny = jax.ShapeDtypeStruct((n,), jax.numpy.float32)
            x = jax.device_put(jax.numpy.zeros(n), self._shardings[src]) if self.is_local(src) else None
            y = self._put(x, src, dst, tiny)
            if self.is_local(dst):
                y.block_until_ready()

    def time_boundary(self, src: int, dst: int, like, reps: int, timer) -> float | None:
        """In this process: as in-process. Across processes: the median over `reps`
        ping-pongs (src -> dst -> src, the receiver sending back what it got) of half
        the round trip, timed on the sender; every process takes part."""
        if self.process_of[src] == self.process_of[dst]:
            return super().time_boundary(src, dst, like, reps, timer) if self.is_local(src) else None
        spec = jax.ShapeDtypeStruct(self.specs[min(src, dst)].shape, self.specs[min(src, dst)].dtype)
        times = []
        for i in range(max(reps, 3) + 1):         # the first round trip is a warm-up
            start = time.perf_counter()
            y = self._put(like, src, dst, spec)
            z = self._put(y if self.is_local(dst) else None, dst, src, spec)
            if self.is_local(src):
                z.block_until_ready()
                if i:
                    times.append((time.perf_counter() - start) / 2)
        return statistics.median(times) if times else None


def _data_size(sharding) -> int:
    """How many ways `sharding` splits dim 0 (1 on one device)."""
    spec = getattr(sharding, "spec", None)
    if not spec or spec[0] is None:
        return 1
    axes = spec[0] if isinstance(spec[0], tuple) else (spec[0],)
    size = 1
    for a in axes:
        size *= sharding.mesh.shape[a]
    return size
