"""Moving activations and gradients between stage workers, behind one interface.

    send(msg, value)   the producer's worker, right after issuing the producing action
    receive(msg)       the consumer's worker; the value is (or will be) on its device

`Transport` is the in-process case: `jax.device_put` to the consumer's device (an
asynchronous copy) into a per-step inbox. `obscura_jax.processes.cross_process` extends it
with JAX's cross-process `jax.device_put` for consumers in other processes.

Workers wait only in `Mailbox.take` (a Condition, never a spin: a spinning Python
thread slows every other thread's dispatch through the GIL, as measured on an H200, BENCHMARKS.md) and in
JAX calls. A failure anywhere aborts the step: every waiting worker wakes up and
stops.
"""
from __future__ import annotations

import threading

import jax

from obscura_jax.runtime.messages import Message
from obscura_jax.runtime.stage_mesh import move


class StepAborted(RuntimeError):
    """Raised in a worker waiting for a message when another thread failed."""


class Mailbox:
    """Keyed hand-over between threads. `take` waits on a condition variable and
    wakes up when the step is aborted."""

    def __init__(self, abort: threading.Event):
        self._items: dict = {}
        self._cv = threading.Condition()
        self._abort = abort
        self.waiting: set = set()         # keys a thread is blocked on (the watchdog's view)

    def put(self, key, value) -> None:
        with self._cv:
            if key in self._items:
                raise ValueError(f"message {key} delivered twice")
            self._items[key] = value
            self._cv.notify_all()

    def take(self, key):
        with self._cv:
            self.waiting.add(key)
            try:
                while key not in self._items:
                    if self._abort.is_set():
                        raise StepAborted(f"step aborted while waiting for {key}")
                    self._cv.wait()
                return self._items.pop(key)
            finally:
                self.waiting.discard(key)

    def wake(self) -> None:
        with self._cv:
            self._cv.notify_all()

    def keys(self) -> list:
        with self._cv:
            return list(self._items)


class Transport:
    """In-process transport: every stage's device belongs to this process.

    `stage_devices[s]` is stage s's jax.Device; `boundary_bytes[b]` the size of a
    message across boundary b (in the step's MemoryLedger, its consumer's inbox
    holds it from its delivery, "put", to the effect of the inbox column the
    consuming worker names when it receives it); `shardings[s]` where a message to
    stage s goes (default: its device; a stage mesh's batch sharding)."""

    def __init__(self, stage_devices, boundary_bytes, shardings=None):
        self.stage_devices = list(stage_devices)
        self.boundary_bytes = list(boundary_bytes)
        self._shardings = list(shardings) if shardings is not None else [
            jax.sharding.SingleDeviceSharding(d) for d in self.stage_devices]
        self.abort = threading.Event()
        self.inbox = Mailbox(self.abort)
        self._ledger = None

    # ---- a step -------------------------------------------------------------------
    def start_step(self, ledger=None) -> None:
        self.abort = threading.Event()
        self.inbox = Mailbox(self.abort)
        self._ledger = ledger

    def step_threads(self) -> list:
        """Extra thread bodies a step needs besides the workers (none in-process)."""
        return []

    def fail_step(self) -> None:
        """Abort: wake every thread waiting in this transport."""
        self.abort.set()
        self.inbox.wake()

    def finish_step(self) -> list:
        """Messages delivered but never consumed (a schedule bug if not empty)."""
        return self.inbox.keys()

    # ---- messages -----------------------------------------------------------------
    def is_local(self, stage: int) -> bool:
        return True

    def send(self, msg: Message, value) -> None:
        self.deliver(msg, move(value, self._shardings[msg.dst]))

    recorder = None   # an EventRecorder while a step is recorded (obscura_jax.run.trainer): times deliveries

    def deliver(self, msg: Message, value) -> None:
        if self.recorder is not None:
            self.recorder.transferred(msg, value)
        if self._ledger is not None:
            self._ledger.note(msg.producer, msg.dst, "put", self.boundary_bytes[msg.boundary])
        self.inbox.put(msg, value)

    def receive(self, msg: Message, effect: str | None = None):
        """The message's value; `effect`: what its consumer does to the inbox, an
        effect of its kind's inbox column ("take_input", "take_grad"; None: an I
        keeps the gradient until its W releases it)."""
        value = self.inbox.take(msg)
        if self._ledger is not None and effect is not None:
            self._ledger.note(msg.consumer, msg.dst, effect, self.boundary_bytes[msg.boundary])
        return value

    def waiting_on(self) -> str:
        """What this process waits for from another process ('' in-process)."""
        return ""

    # ---- start-up and measurement --------------------------------------------------
    def warm_up(self) -> None:
        """Nothing to warm in-process."""

    def time_boundary(self, src: int, dst: int, like, reps: int, timer) -> float | None:
        """Seconds to move `like` (a local array on stage src's device) to stage dst's
        device with this transport; `timer(fn, reps)` times fn (obscura_jax.profiling.stopwatch)."""
        if self.stage_devices[src].id == self.stage_devices[dst].id:
            return None
        return timer(lambda: move(like, self._shardings[dst]), reps)
