"""The pipeline executor: runs one validated Schedule per training iteration with one
stage worker per device (obscura_jax.runtime.worker), in one process or several.

Each worker walks its device's row, which is the global issue order
(`schedules.issue_order`) restricted to that device's stages: the schedule stays the
only source of order, and the issue order, a topological order of the dependency
rule, guarantees that whatever a worker waits for is produced by a worker that
does not wait for it. Workers never block between actions (JAX dispatch is
asynchronous), so stages on different devices run concurrently; a device whose
queue is full blocks only its own worker. Messages between stages go through a
Transport (obscura_jax.runtime.transport: in-process; obscura_jax.processes.cross_process: several
processes). A split backward (I then W, zero-bubble style) runs as two programs
over the same residuals (obscura_jax.runtime.stage_program); a B whose micro-batch also has
a W on that stage is the input half (the older spelling of I).

    run_actions   every action of the schedule (this process's share of them)
    apply_updates one optimizer step per local stage

A process holds only its own stages: `programs[s]` and `states[s]` are None for
stages that run in another process.
"""
from __future__ import annotations

import functools
import threading
from dataclasses import dataclass, field

import jax
import jax.numpy as jnp
import optax

from obscura_jax.errors import RunError
from obscura_jax.runtime.messages import device_rows, message_routes
from obscura_jax.runtime.out_of_memory import naming
from obscura_jax.runtime.stage_program import StageProgram
from obscura_jax.runtime.swap import HostSwap
from obscura_jax.runtime.transport import Transport
from obscura_jax.runtime.worker import StageWorker, StepContext, run_threads
from schedules.ir import Action, Kind, Schedule
from schedules.memory import fold_levels, measured_effect


@dataclass
class StageState:
    """Training state of one stage, on its device."""
    params: dict
    opt_state: object
    grads: dict


@dataclass
class MemoryLedger:
    """Bytes live on each stage's device, counted in the global issue order (the CPU
    stand-in for memory_stats()): residuals kept on device plus activations/grads
    waiting in the stage's inbox. `peak` is the maximum over the iteration.

    Workers of several devices and the transport note effects as they issue
    (`note`: the action, an effect of its row of the per-kind table,
    schedules/actions.py, memory and inbox columns, and the bytes the engine
    measured); `settle` then applies them in issue order with the memory fold's
    effect semantics (schedules.memory.measured_effect) and sums them as the fold
    does (schedules.memory.fold_levels), so the count does not depend on how the
    threads happened to interleave.

    Residual bytes in host memory (a policy's offloaded leaves, swapped-out ones)
    are not device memory: they are counted apart, in `host_live` / `host_peak`."""
    live: list[int]
    peak: list[int]
    host_live: list[int] = field(default_factory=list)
    host_peak: list[int] = field(default_factory=list)
    _notes: list = field(default_factory=list, repr=False, compare=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    @classmethod
    def zeros(cls, p: int) -> "MemoryLedger":
        return cls([0] * p, [0] * p, [0] * p, [0] * p)

    def note(self, action: Action, stage: int, effect: str, nbytes: int, host_bytes: int = 0) -> None:
        """`action`'s `effect` (schedules.memory.measured_effect: an effect of the table's
        memory or inbox column) on the stage's device, sized `nbytes` on the device and
        `host_bytes` in host memory."""
        with self._lock:
            self._notes.append((action, stage, effect, nbytes, host_bytes))

    def settle(self, position: dict[Action, int]) -> "MemoryLedger":
        """Apply the noted effects in issue order (stable: one action's effects keep
        the order they were noted in)."""
        with self._lock:
            notes, self._notes = self._notes, []
        order = sorted(range(len(notes)), key=lambda i: (position[notes[i][0]], i))
        blocks: dict[tuple[int, int], tuple] = {}     # (stage, micro-batch) -> its (device, host) bytes
        changes = [None] * len(notes)
        for i in order:
            a, _, effect, nbytes, host_bytes = notes[i]
            key = (a.stage, a.microbatch)
            dev, host, after = measured_effect(effect, blocks.get(key), nbytes, host_bytes)
            if after is None:
                blocks.pop(key, None)
            else:
                blocks[key] = after
            changes[i] = (dev, host)
        for part, (live, peak) in enumerate(((self.live, self.peak), (self.host_live, self.host_peak))):
            for stage, now in enumerate(live):
                events = [(-1, 0, now)] + [(position[a], i, changes[i][part]) for i, (a, s, *_) in
                                           enumerate(notes) if s == stage]
                level, top = fold_levels(events)
                live[stage] = int(level)
                peak[stage] = max(peak[stage], int(top))
        return self


@dataclass
class IterationResult:
    losses: jax.Array | None           # [m] per-micro-batch losses (None: the last stage is elsewhere)
    dispatch_seconds: dict[str, list[float]] = field(default_factory=dict)  # host time per action kind
    ledger: MemoryLedger | None = None


_COMPILED_UPDATES: dict = {}


def compiled_update(optimizer, params, opt_state, grads, stacked: bool = False):
    """One optimizer step that also hands back zeroed grad accumulators (all donated),
    compiled ahead of time so no step pays for compilation; every array keeps its
    sharding. `stacked`: the accumulators hold one partial sum per data shard on a
    leading axis (a stage mesh, obscura_jax.runtime.stage_mesh), summed here: the stage's
    data-parallel all-reduce, once per step. Cached by optimizer, shardings and
    state shapes, so pipelines in one process share compilations."""
    state = (params, opt_state, grads)
    specs = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=a.sharding), state)
    shardings = jax.tree.map(lambda a: a.sharding, state)
    key = (optimizer, stacked, jax.tree.structure(specs),
           tuple((a.shape, str(a.dtype), a.sharding) for a in jax.tree.leaves(specs)))
    if key not in _COMPILED_UPDATES:
        def update(params, opt_state, grads):
            total = jax.tree.map(lambda g: g.sum(0), grads) if stacked else grads
            updates, opt_state = optimizer.update(total, opt_state, params)
            return optax.apply_updates(params, updates), opt_state, jax.tree.map(jnp.zeros_like, grads)
        _COMPILED_UPDATES[key] = jax.jit(update, donate_argnums=(0, 1, 2),
                                         out_shardings=shardings).lower(*specs).compile()
    return _COMPILED_UPDATES[key]


@functools.lru_cache(maxsize=None)
def _init_fn(optimizer, sharding):
    """optimizer.init; on a stage mesh (sharding None) its state follows the params'."""
    return jax.jit(optimizer.init, out_shardings=sharding)


def _place_like_params(opt_state, params, param_shardings, replicated):
    """An optimizer state on a stage mesh: every part shaped like the params (Adam's
    moments) sharded as they are, the rest (a step count) replicated. XLA gives
    zeros made in optimizer.init no sharding of their own."""
    tree = jax.tree.structure(params)

    def place(x):
        if jax.tree.structure(x) == tree:
            return jax.device_put(x, param_shardings)
        return jax.tree.map(lambda a: jax.device_put(a, replicated), x)
    return jax.tree.map(place, opt_state, is_leaf=lambda x: jax.tree.structure(x) == tree)


@functools.lru_cache(maxsize=None)   # one object per setting: compiled steps keyed by it are reused
def make_optimizer(name: str = "adamw", learning_rate: float = 1e-3, weight_decay: float = 0.01):
    if learning_rate <= 0:
        raise ValueError(f"learning rate must be > 0, got {learning_rate}")
    if name == "adamw":
        return optax.adamw(learning_rate, weight_decay=weight_decay)
    if name == "adam":
        return optax.adam(learning_rate)
    if name == "sgd":
        return optax.sgd(learning_rate)
    raise ValueError(f"unknown optimizer {name!r} (choose adamw, adam or sgd)")


class PipelineExecutor:
    """Runs a Schedule on stage programs placed on their devices.

    `programs[s]` is None for a stage of another process; then `stage_devices` (every
    stage's jax.Device) and a `transport` that reaches the other processes are needed.
    """

    def __init__(self, schedule: Schedule, programs: list[StageProgram | None], optimizer,
                 order: list[Action], *, swap: HostSwap | None = None, swap_enabled: bool = True,
                 transport: Transport | None = None, stage_devices=None):
        p = schedule.num_stages
        if len(programs) != p:
            raise ValueError(f"schedule {schedule.name!r} has {p} stages, the pipeline {len(programs)}")
        self.local = [s for s, prog in enumerate(programs) if prog is not None]
        if not self.local:
            raise ValueError("a pipeline process must run at least one stage")
        if (0 in self.local and not programs[0].takes_tokens) or \
                (p - 1 in self.local and not programs[-1].returns_loss):
            raise ValueError("the first stage must take tokens and the last must return the loss")
        self.schedule = schedule
        self.programs = programs
        self.split = schedule.split_blocks
        for s in self.local:   # compile the backward programs the schedule runs, ahead of the first step
            kinds = {schedule.effective_kind(a) for a in schedule.stages[s].actions}
            if Kind.B in kinds:
                programs[s].compile_fused()
            if kinds & {Kind.I, Kind.W}:
                programs[s].compile_split()
        self.devices = list(stage_devices) if stage_devices is not None else [prog.device for prog in programs]
        self.m = schedule.num_microbatches
        self.swap = swap or HostSwap()
        self.swap_enabled = swap_enabled
        self.swap_fraction = [spec.swap_fraction for spec in schedule.stages]
        self.routes = message_routes(schedule)
        self.transport = transport or Transport(self.devices, [prog.output_bytes for prog in programs[:-1]])
        self._loss_dy = programs[-1].loss_weight(self.m) if p - 1 in self.local else None
        self.optimizer = optimizer
        self._init = {s: _init_fn(optimizer, programs[s].sharding if programs[s].mesh.single else None)
                      for s in self.local}
        self._update: dict = {}
        self.order = order

    @property
    def order(self) -> list[Action]:
        return self._order

    @order.setter
    def order(self, order: list[Action]) -> None:
        """A new global issue order (e.g. from measured costs): new device rows, and
        the transport's cross-process transfer order."""
        order = list(order)
        if len(order) != sum(len(spec.actions) for spec in self.schedule.stages):
            raise ValueError("issue order does not cover the schedule's actions exactly once")
        self._order = order
        self._position = {a: i for i, a in enumerate(order)}
        self.rows = device_rows(order, [d.id for d in self.devices], self.local)
        set_order = getattr(self.transport, "set_order", None)
        if set_order is not None:
            set_order(order, self.routes)

    def init_state(self, stage_params: list[dict | None]) -> list[StageState | None]:
        """Place each local stage's params on its device, with fresh optimizer state
        and zero grads (and compile the optimizer steps for them)."""
        states: list[StageState | None] = [None] * len(self.programs)
        for s in self.local:
            prog = self.programs[s]
            params = jax.device_put(stage_params[s], prog.param_shardings)
            opt_state = self._init[s](params)
            if not prog.mesh.single:
                opt_state = _place_like_params(opt_state, params, prog.param_shardings, prog.sharding)
            states[s] = StageState(params, opt_state, prog.zero_grads(params))
        self._update = {s: compiled_update(self.optimizer, states[s].params, states[s].opt_state,
                                           states[s].grads, stacked=not self.programs[s].mesh.single)
                        for s in self.local}
        return states

    # ---- one iteration -----------------------------------------------------------
    def run_iteration(self, states: list, tokens, targets, recorder=None,
                      track_memory: bool = False) -> IterationResult:
        """One training step: every action of the schedule, then one optimizer step per
        stage. tokens/targets: sequences of m host arrays [b, T]. Updates `states` in
        place (buffers are donated) and returns the per-micro-batch losses, without
        blocking."""
        result = self.run_actions(states, tokens, targets, recorder, track_memory)
        self.apply_updates(states)
        return result

    def apply_updates(self, states: list) -> None:
        """One optimizer step per local stage; grad accumulators come back zeroed."""
        if not self._update:
            raise ValueError("init_state() compiles the optimizer steps: call it first")
        for s, update in self._update.items():
            st, device = states[s], self.devices[s]
            with naming(f"the optimizer step of stage {s}", f"{device.platform}:{device.id}"):
                st.params, st.opt_state, st.grads = update(st.params, st.opt_state, st.grads)

    def run_actions(self, states: list, tokens, targets, recorder=None,
                    track_memory: bool = False) -> IterationResult:
        """The schedule's actions only (one worker thread per local device; returns
        when every action is issued, not when it is done): afterwards each local
        stage's `grads` holds the gradient of the mean loss over the m micro-batches
        (added to what was there)."""
        if len(tokens) != self.m or len(targets) != self.m:
            raise ValueError(f"expected {self.m} micro-batches, got {len(tokens)}")
        p = len(self.programs)
        first, last = self.programs[0], self.programs[-1]
        ledger = MemoryLedger.zeros(p) if track_memory else None
        ctx = StepContext(
            programs=self.programs, states=states, transport=self.transport, routes=self.routes,
            tokens=jax.device_put(list(tokens), first.batch_sharding) if first is not None else None,
            targets=jax.device_put(list(targets), last.batch_sharding) if last is not None else None,
            loss_dy=self._loss_dy, losses=[None] * self.m, swap=self.swap,
            swap_fraction=self.swap_fraction, swap_enabled=self.swap_enabled, ledger=ledger,
            recorder=recorder, split=self.split)
        self.transport.start_step(ledger)
        workers = [StageWorker(row, ctx) for row in self.rows.values()]
        error = run_threads([w.run for w in workers] + self.transport.step_threads(),
                            self.transport.fail_step)
        if error is not None:
            raise error
        left = [key for w in workers for key in (*w.residuals, *w.pending_dy)]
        messages = self.transport.finish_step()
        if left or messages:
            raise ValueError(f"schedule {self.schedule.name!r} left work undone: "
                             f"{len(left)} residuals, {len(messages)} messages")
        if ledger is not None:
            ledger.settle(self._position)
        dispatch: dict[str, list[float]] = {}
        for w in workers:
            for kind, seconds in w.dispatch.items():
                dispatch.setdefault(kind, []).extend(seconds)
        losses = jnp.stack(jax.device_put(ctx.losses, last.sharding)) if last is not None else None
        return IterationResult(losses, dispatch, ledger)
