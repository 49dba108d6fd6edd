"""A stage worker: one thread per device, issuing that device's row of the schedule
in order (its stages' F, B, SO, SI), never blocking between actions except where it
must: waiting for a message from another stage (Transport.receive) or in a JAX
call whose device queue is full. A full queue thus blocks only its own device's
worker, and devices keep running concurrently.

    F  y, res = fwd(params, x);  y -> every stage that depends on it (Transport.send)
    B  grads, dx = bwd(params, res, dy, grads);  dx -> the stage that depends on it
    I  dx, held = I(params, res, dy);  dx -> upstream; res becomes held (what W
       reads: output cotangents, matmul inputs), dy stays until the W
    W  grads = W(params, held, dy, grads);  frees held and dy
    SO / SI  a fraction of res to pinned host memory and back (obscura_jax.runtime.swap)

Residuals stay with the worker of their stage; the loss stage's dy is 1/m, so the
accumulated grads are those of the mean loss over the m micro-batches. A B whose
micro-batch has a W runs as I (schedules.actions.effective_kind). With a ledger,
each action notes the effects of its kind's row of the table (schedules/actions.py:
memory and inbox columns) with the sizes it measured.

A worker runs at most MAX_AHEAD actions ahead of the oldest one still computing.
XLA's CPU client lets 32 programs wait per device, and a 33rd dispatch blocks one
of its pool threads on that device's queue. Programs on a stage mesh of several
devices run their collectives one program at a time, on the same pool. So
workers that dispatch far ahead fill the pool with blocked dispatches, and the
running collective's other half never gets a thread: XLA aborts the process
after 40 s ("Termination timeout for `all reduce ...`"). This was seen on the
2-core CPU machine under load, where execution lags behind dispatch.
"""
from __future__ import annotations

import collections
import threading
import time
from dataclasses import dataclass, field

from obscura_jax.cli import interrupt
from obscura_jax.runtime import out_of_memory
from obscura_jax.runtime.transport import StepAborted
from schedules.actions import KINDS, effective_kind
from schedules.ir import Action, Kind

MAX_AHEAD = 16      # actions in flight per worker: below XLA CPU's 32 programs per device


@dataclass
class StepContext:
    """What every worker of one step shares (each touches only its own stages)."""
    programs: list                 # StageProgram per stage (None for another process's stage)
    states: list                   # StageState per stage (None likewise)
    transport: object              # obscura_jax.runtime.transport.Transport
    routes: object                 # obscura_jax.runtime.messages.Routes
    tokens: list | None            # stage 0's micro-batch inputs on its device
    targets: list | None           # the last stage's targets on its device
    loss_dy: object                # dy of the loss stage
    losses: list                   # [m] per-micro-batch loss arrays (filled by the last stage)
    swap: object                   # obscura_jax.runtime.swap.HostSwap
    swap_fraction: list[float]
    swap_enabled: bool
    ledger: object = None          # MemoryLedger or None
    recorder: object = None        # EventRecorder or None
    split: frozenset = frozenset()  # (stage, micro-batch) whose B is the input half (a W follows)


@dataclass
class StageWorker:
    """Issues `row` (one device's actions in order) for one step."""
    row: list[Action]
    ctx: StepContext
    residuals: dict = field(default_factory=dict)
    pending_dy: dict = field(default_factory=dict)    # (stage, mb) -> (dy, its message's bytes) an I keeps for W
    dispatch: dict = field(default_factory=lambda: {k.value: [] for k in KINDS})

    def run(self) -> None:
        clock = time.perf_counter
        recorder = self.ctx.recorder
        inject = out_of_memory.injected_setting()
        in_flight: collections.deque = collections.deque()
        for action in self.row:
            if len(in_flight) >= MAX_AHEAD:
                done, arrays = in_flight.popleft()
                with self._naming(done):
                    _wait_ready(arrays)
            t0 = clock()
            with self._naming(action):
                out_of_memory.maybe_inject(action, inject)
                produced = self.issue(action)
            self.dispatch[action.kind.value].append(clock() - t0)
            in_flight.append((action, produced))
            if recorder is not None:
                recorder.issued(action, produced, t0)

    def _naming(self, action: Action):
        """An out-of-memory while issuing (or waiting for) `action`, named: its device and program."""
        device = self.ctx.programs[action.stage].device
        return out_of_memory.naming(out_of_memory.action_text(action), f"{device.platform}:{device.id}")

    def issue(self, action: Action) -> tuple:
        """Dispatch one action; returns the arrays that are ready when it is done."""
        kind = effective_kind(action.kind, (action.stage, action.microbatch) in self.ctx.split)
        issuer = {Kind.F: self._forward, Kind.B: self._backward, Kind.I: self._input_grad,
                  Kind.W: self._weight_grad, Kind.SO: self._swap_out, Kind.SI: self._swap_in}.get(kind)
        if issuer is None:
            raise ValueError(f"unsupported action {action}")
        return issuer(action)

    def _receive(self, action: Action, kind: Kind):
        """Its input; the ledger notes what `kind` does to the inbox at its start (its
        take, if any: one at its end is noted by `_taken` once the program is issued)."""
        msgs = self.ctx.routes.incoming[action]
        take = next((effect for at, effect in KINDS[kind].inbox if at == "start" and effect.startswith("take")),
                    None)
        return self.ctx.transport.receive(msgs[0], take) if msgs else None

    def _taken(self, action: Action, kind: Kind) -> dict:
        """The sizes for `_note` of `kind`'s takes at its end (B's gradient: read to the
        last, it leaves the inbox when B ends)."""
        msgs = self.ctx.routes.incoming[action]
        if not msgs:
            return {}
        return {effect: (self.ctx.transport.boundary_bytes[msgs[0].boundary], 0)
                for at, effect in KINDS[kind].inbox if at == "end" and effect.startswith("take")}

    def _note(self, a: Action, kind: Kind, **sizes) -> None:
        """Note in the ledger each effect of `kind`'s memory and inbox columns that
        the engine has a size for: sizes[effect] = (device bytes, host bytes). One
        it has none for is no change here: I's remat (the measured block W reads
        holds what recompute brought back), the takes at the start (noted on receiving)."""
        if self.ctx.ledger is None:
            return
        rule = KINDS[kind]
        for _, effect in rule.memory + rule.inbox:
            if effect in sizes:
                self.ctx.ledger.note(a, a.stage, effect, *sizes[effect])

    def _send(self, action: Action, value) -> None:
        for msg in self.ctx.routes.outgoing[action]:
            self.ctx.transport.send(msg, value)

    def _forward(self, a: Action) -> tuple:
        ctx, s, mb = self.ctx, a.stage, a.microbatch
        prog, st = ctx.programs[s], ctx.states[s]
        x = ctx.tokens[mb] if prog.takes_tokens else self._receive(a, Kind.F)
        if prog.returns_loss:
            out, res = prog.forward(st.params, x, ctx.targets[mb])
            ctx.losses[mb] = out
        else:
            out, res = prog.forward(st.params, x)
            self._send(a, out)
        self.residuals[(s, mb)] = res
        self._note(a, Kind.F, alloc=(res.device_bytes, res.host_resident_bytes))
        return (out,)

    def _backward(self, a: Action) -> tuple:
        ctx, s, mb = self.ctx, a.stage, a.microbatch
        prog, st = ctx.programs[s], ctx.states[s]
        dy = ctx.loss_dy if prog.returns_loss else self._receive(a, Kind.B)
        res = self.residuals.pop((s, mb))
        st.grads, dx, done = prog.backward(st.params, res, dy, st.grads)
        self._note(a, Kind.B, free=(res.device_bytes, res.host_resident_bytes), **self._taken(a, Kind.B))
        if dx is not None:
            self._send(a, dx)
        return (done,)

    def _input_grad(self, a: Action) -> tuple:
        ctx, s, mb = self.ctx, a.stage, a.microbatch
        prog, st = ctx.programs[s], ctx.states[s]
        msgs = ctx.routes.incoming[a]
        dy = ctx.loss_dy if prog.returns_loss else self._receive(a, Kind.I)
        res = self.residuals[(s, mb)]
        st.grads, dx, held, done = prog.input_grad(st.params, res, dy, st.grads)
        self.residuals[(s, mb)] = held
        self.pending_dy[(s, mb)] = (dy, ctx.transport.boundary_bytes[msgs[0].boundary] if msgs else 0)
        self._note(a, Kind.I, input_grad=(held.device_bytes, held.host_resident_bytes))
        if dx is not None:
            self._send(a, dx)
        return (done,)

    def _weight_grad(self, a: Action) -> tuple:
        ctx, s, mb = self.ctx, a.stage, a.microbatch
        prog, st = ctx.programs[s], ctx.states[s]
        res, (dy, dy_bytes) = self.residuals.pop((s, mb)), self.pending_dy.pop((s, mb))
        st.grads, done = prog.weight_grad(st.params, res, dy, st.grads)
        self._note(a, Kind.W, free=(res.device_bytes, res.host_resident_bytes), release_grad=(dy_bytes, 0))
        return (done,)

    def _swap_out(self, a: Action) -> tuple:
        ctx, key = self.ctx, (a.stage, a.microbatch)
        res = self.residuals[key]
        if ctx.swap_enabled and ctx.swap_fraction[a.stage] > 0:
            res = ctx.swap.swap_out(res, ctx.swap_fraction[a.stage], ctx.programs[a.stage].device)
            self.residuals[key] = res
            self._note(a, Kind.SO, swap_out=(res.host_bytes, 0))
        return tuple(res.leaves[i] for i in res.host_slots)

    def _swap_in(self, a: Action) -> tuple:
        ctx, key = self.ctx, (a.stage, a.microbatch)
        res = self.residuals[key]
        if not res.host_slots:
            return ()
        self._note(a, Kind.SI, swap_in=(res.host_bytes, 0))
        slots = res.host_slots
        res = ctx.swap.swap_in(res, ctx.programs[a.stage].device)
        self.residuals[key] = res
        return tuple(res.leaves[i] for i in slots)


def _wait_ready(arrays: tuple) -> None:
    """Until an action's outputs are computed. An output a later program took as a
    donated input is gone: that program waits for it, and the window for that one."""
    for a in arrays:
        try:
            if not a.is_deleted():
                a.block_until_ready()
        except RuntimeError:    # jax's error for a buffer donated meanwhile (another thread's program)
            if not a.is_deleted():
                raise


def run_threads(bodies: list, on_error, grace: float = 10.0) -> BaseException | None:
    """Run each body in its own thread and wait for all; the first exception calls
    `on_error()` (which wakes the others) and is returned once they have stopped, or
    after `grace` seconds: a thread blocked in an XLA call (a transfer from a process
    that failed) cannot be woken, and the error must still be reported. Threads are
    daemons: a stuck one cannot keep the process alive."""
    errors: list[BaseException] = []
    failed = threading.Event()
    lock = threading.Lock()

    def guarded(body):
        try:
            body()
        except BaseException as e:  # handed to the caller; the first one wins
            with lock:
                errors.append(e)
            failed.set()
            on_error()

    threads = [threading.Thread(target=guarded, args=(b,), daemon=True, name=f"obscura-worker-{i}")
               for i, b in enumerate(bodies)]
    for t in threads:
        t.start()
    try:
        for t in threads:
            while t.is_alive() and not failed.is_set():
                t.join(0.5)
                interrupt.raise_if_requested()
    except KeyboardInterrupt:
        # Ctrl-C lands here: the workers must leave XLA before the interpreter
        # finalizes, or the process dies of SIGSEGV instead of exiting 130
        on_error()
        _join(threads, grace)
        raise
    if failed.is_set():
        _join(threads, grace)
    real = [e for e in errors if not isinstance(e, StepAborted)]
    return (real or errors or [None])[0]


def _join(threads: list, grace: float) -> None:
    """Wait for every thread, `grace` seconds in all."""
    deadline = time.monotonic() + grace
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
