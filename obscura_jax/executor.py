"""The pipeline executor: interprets one validated Schedule per training iteration.

It issues the schedule's actions in one global order consistent with every stage's
order and all dependencies (`schedules.issue_order`), never blocking between
actions: JAX dispatch is asynchronous, so stages on different devices really run
concurrently, and a stage's device executes its actions in issue order.

    F  y, res = fwd(params, x);  y -> device_put to the next stage's device
    B  grads, dx = bwd(params, res, dy, grads);  dx -> the previous stage's device
    SO / SI  a fraction of res to pinned host memory and back (obscura_jax.swap)
    W  not supported: the engine's backward computes input and weight grads together

The loss stage's dy is 1/m, so accumulated grads are those of the mean loss over the
m micro-batches (= the whole batch's loss); then one optimizer step per stage.
"""
from __future__ import annotations

import functools
import time
from dataclasses import dataclass, field

import jax
import jax.numpy as jnp
import optax

from obscura_jax.stage_program import StageProgram
from obscura_jax.swap import HostSwap
from schedules.ir import Action, Kind, Schedule


@dataclass
class StageState:
    """Training state of one stage, on its device."""
    params: dict
    opt_state: object
    grads: dict


@dataclass
class MemoryLedger:
    """Bytes live on each stage's device, counted in issue order (the CPU stand-in
    for memory_stats()): residuals kept on device plus activations/grads waiting in
    the stage's inbox. `peak` is the maximum over the iteration."""
    live: list[int]
    peak: list[int]

    @classmethod
    def zeros(cls, p: int) -> "MemoryLedger":
        return cls([0] * p, [0] * p)

    def add(self, stage: int, nbytes: int) -> None:
        self.live[stage] += nbytes
        if self.live[stage] > self.peak[stage]:
            self.peak[stage] = self.live[stage]


@dataclass
class IterationResult:
    losses: jax.Array                  # [m] per-micro-batch losses (on the last stage's device)
    dispatch_seconds: dict[str, list[float]] = field(default_factory=dict)  # host time per action kind
    ledger: MemoryLedger | None = None


_COMPILED_UPDATES: dict = {}


def compiled_update(optimizer, sharding, params, opt_state, grads):
    """One optimizer step that also hands back zeroed grad accumulators (all donated),
    compiled ahead of time so no step pays for compilation. Cached by optimizer,
    device and state shapes, so pipelines in one process share compilations."""
    specs = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=sharding),
                         (params, opt_state, grads))
    key = (optimizer, sharding, jax.tree.structure(specs),
           tuple((a.shape, str(a.dtype)) for a in jax.tree.leaves(specs)))
    if key not in _COMPILED_UPDATES:
        def update(params, opt_state, grads):
            updates, opt_state = optimizer.update(grads, opt_state, params)
            return optax.apply_updates(params, updates), opt_state, jax.tree.map(jnp.zeros_like, grads)
        _COMPILED_UPDATES[key] = jax.jit(update, donate_argnums=(0, 1, 2),
                                         out_shardings=sharding).lower(*specs).compile()
    return _COMPILED_UPDATES[key]


@functools.lru_cache(maxsize=None)
def _init_fn(optimizer, sharding):
    return jax.jit(optimizer.init, out_shardings=sharding)


@functools.lru_cache(maxsize=None)
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
    """Runs a Schedule on stage programs placed on their devices."""

    def __init__(self, schedule: Schedule, programs: list[StageProgram], optimizer,
                 order: list[Action], *, swap: HostSwap | None = None, swap_enabled: bool = True):
        p = schedule.num_stages
        if len(programs) != p:
            raise ValueError(f"schedule {schedule.name!r} has {p} stages, the pipeline {len(programs)}")
        for s, spec in enumerate(schedule.stages):
            if any(a.kind is Kind.W for a in spec.actions):
                raise ValueError(f"schedule {schedule.name!r} splits B/W on stage {s}: the engine runs "
                                 "fused backwards only (no W actions)")
        if len(order) != sum(len(spec.actions) for spec in schedule.stages):
            raise ValueError("issue order does not cover the schedule's actions exactly once")
        if not programs[0].takes_tokens or not programs[-1].returns_loss:
            raise ValueError("the first stage must take tokens and the last must return the loss")
        self.schedule = schedule
        self.programs = programs
        self.order = list(order)
        self.devices = [prog.device for prog in programs]
        self.m = schedule.num_microbatches
        self.swap = swap or HostSwap()
        self.swap_enabled = swap_enabled
        self.swap_fraction = [spec.swap_fraction for spec in schedule.stages]
        self._loss_dy = programs[-1].loss_weight(self.m)
        self.optimizer = optimizer
        self._init = [_init_fn(optimizer, prog.sharding) for prog in programs]
        self._update: list = []

    def init_state(self, stage_params: list[dict]) -> list[StageState]:
        """Place each stage's params on its device, with fresh optimizer state and zero
        grads (and compile the optimizer steps for them)."""
        states = []
        for prog, init, params in zip(self.programs, self._init, stage_params):
            params = jax.device_put(params, prog.sharding)
            states.append(StageState(params, init(params), prog.zero_grads(params)))
        self._update = [compiled_update(self.optimizer, prog.sharding, st.params, st.opt_state, st.grads)
                        for prog, st in zip(self.programs, states)]
        return states

    # ---- one iteration -----------------------------------------------------------
    def run_iteration(self, states: list[StageState], tokens, targets, recorder=None,
                      track_memory: bool = False) -> IterationResult:
        """One training step: every action of the schedule, then one optimizer step per
        stage. tokens/targets: sequences of m host arrays [b, T]. Updates `states` in
        place (buffers are donated) and returns the per-micro-batch losses, without
        blocking."""
        result = self.run_actions(states, tokens, targets, recorder, track_memory)
        self.apply_updates(states)
        return result

    def apply_updates(self, states: list[StageState]) -> None:
        """One optimizer step per stage; grad accumulators come back zeroed."""
        if not self._update:
            raise ValueError("init_state() compiles the optimizer steps: call it first")
        for st, update in zip(states, self._update):
            st.params, st.opt_state, st.grads = update(st.params, st.opt_state, st.grads)

    def run_actions(self, states: list[StageState], tokens, targets, recorder=None,
                    track_memory: bool = False) -> IterationResult:
        """The schedule's actions only: afterwards each stage's `grads` holds the
        gradient of the mean loss over the m micro-batches (added to what was there)."""
        if len(tokens) != self.m or len(targets) != self.m:
            raise ValueError(f"expected {self.m} micro-batches, got {len(tokens)}")
        first, last = self.programs[0], self.programs[-1]
        tok = jax.device_put(list(tokens), first.sharding)
        tgt = jax.device_put(list(targets), last.sharding)
        inbox_act: dict = {}
        inbox_grad: dict = {}
        residuals: dict = {}
        losses: list = [None] * self.m
        ledger = MemoryLedger.zeros(len(self.programs)) if track_memory else None
        dispatch: dict[str, list[float]] = {k.value: [] for k in (Kind.F, Kind.B, Kind.SO, Kind.SI)}
        clock = time.perf_counter

        for action in self.order:
            s, mb, kind = action.stage, action.microbatch, action.kind
            prog, st = self.programs[s], states[s]
            t0 = clock()
            if kind is Kind.F:
                if prog.takes_tokens:
                    x = tok[mb]
                else:
                    x = inbox_act.pop((s, mb))
                    if ledger:
                        ledger.add(s, -self.programs[s - 1].output_bytes)
                if prog.returns_loss:
                    out, res = prog.forward(st.params, x, tgt[mb])
                    losses[mb] = out
                else:
                    out, res = prog.forward(st.params, x)
                    inbox_act[(s + 1, mb)] = jax.device_put(out, self.devices[s + 1])
                    if ledger:
                        ledger.add(s + 1, prog.output_bytes)
                residuals[(s, mb)] = res
                if ledger:
                    ledger.add(s, res.device_bytes)
                produced = (out,)
            elif kind is Kind.B:
                dy = self._loss_dy if prog.returns_loss else inbox_grad.pop((s, mb))
                res = residuals.pop((s, mb))
                st.grads, dx, done = prog.backward(st.params, res, dy, st.grads)
                if ledger:
                    ledger.add(s, -res.device_bytes)
                    if not prog.returns_loss:
                        ledger.add(s, -prog.output_bytes)
                if dx is not None:
                    inbox_grad[(s - 1, mb)] = jax.device_put(dx, self.devices[s - 1])
                    if ledger:
                        ledger.add(s - 1, self.programs[s - 1].output_bytes)
                produced = (done,)
            elif kind is Kind.SO:
                res = residuals[(s, mb)]
                if self.swap_enabled and self.swap_fraction[s] > 0:
                    res = self.swap.swap_out(res, self.swap_fraction[s], self.devices[s])
                    residuals[(s, mb)] = res
                    if ledger:
                        ledger.add(s, -res.host_bytes)
                produced = tuple(res.leaves[i] for i in res.host_slots)
            elif kind is Kind.SI:
                res = residuals[(s, mb)]
                if res.host_slots:
                    if ledger:
                        ledger.add(s, res.host_bytes)
                    slots = res.host_slots
                    res = self.swap.swap_in(res, self.devices[s])
                    residuals[(s, mb)] = res
                    produced = tuple(res.leaves[i] for i in slots)
                else:
                    produced = ()
            else:  # W was rejected in __init__
                raise ValueError(f"unsupported action {action}")
            dispatch[kind.value].append(clock() - t0)
            if recorder is not None:
                recorder.issued(action, produced, t0)

        if residuals or inbox_act or inbox_grad:
            raise ValueError(f"schedule {self.schedule.name!r} left work undone: "
                             f"{len(residuals)} residuals, {len(inbox_act) + len(inbox_grad)} messages")
        return IterationResult(jnp.stack(jax.device_put(losses, last.sharding)), dispatch, ledger)
