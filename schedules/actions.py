"""What an action does: one row per kind, the one place its meaning lives.

    kind  waits on (its inputs)             lane      duration under StageCosts              memory (the fold)
    F     F(s-1, x)                         compute   fwd + action_overhead                  start: the block is allocated (kept bytes)
    B     F(s, x); B/I(s+1, x) unless s     compute   bwd (+ recompute on an adjusted        end: the block is freed
          is last; SI(s, x) if swapped                stage) + action_overhead
    I     as B                              compute   input_grad (+ recompute)               start: recompute re-materialises (remat);
                                                      + action_overhead                      end: the block becomes what W reads
    W     I(s, x)                           compute   weight_grad + action_overhead          end: the block is freed
    SO    F(s, x)                           host_out  swap_fraction x kept / host_bandwidth  end: its share leaves for host
    SI    SO(s, x)                          host_in   as SO                                  start: the share comes back

A B whose micro-batch also has a W on its stage is the input half, the older
spelling of I (schedules/kinds.py): it is an I in every column (`effective_kind`,
the one place that says so; `Schedule.effective_kind` applies it to a schedule).
Inbox: F(s-1, x) puts the activation F(s, x) takes at its start (the block the
forward keeps holds its input); the backward-input step of (s+1, x) puts the
gradient that B(s, x) takes at its end (B reads it to the last: it is not donated),
or that W(s, x) releases at its end when the backward is split (an I keeps it).

Lanes: a device runs its compute lane (F, B, I, W of all its stages) in row
order; its host links run SO and SI, one at a time each, full duplex and apart
from compute. The simulator also issues a swap only once its device reached its
place in the row: an SO after the compute op listed before it has ended, an SI
also after the SO listed before it ("evict one block before loading one").
An input from another device arrives p2p_time of the boundary after it ends; a
link next to a swapping stage keeps 1 - link_sharing of its bandwidth.

Who reads the table: `priced` applies its waits, lane, duration and recomputes
columns to one schedule's actions under one StageCosts, and the list scheduler
(schedules/scheduling/list_schedule.py: the simulator, the relaxations, the measured
timeline) reads what it returns; schedules.deps reads waits; the memory fold
(schedules.memory) the memory column; the runtime's stage workers
(obscura_jax.runtime.worker) the memory and inbox columns, which they note in the
MemoryLedger; the lane column, through `LANE_OF` and `COMPUTE_KINDS`, every place
that asks whether an action computes or on which lane it runs (the IR's overlapped
pairs, timeline statistics, trace tracks, the measured timeline's events, the
run summary, the swap pass, the torch CSV). The inbox of the memory fold
(schedules.memory._held) follows the inbox rule above without reading the column.
"""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Callable, Sequence

from schedules.costs import StageCosts
from schedules.kinds import Action, Kind, action

COMPUTE, HOST_OUT, HOST_IN = "compute", "host_out", "host_in"
LANES = (COMPUTE, HOST_OUT, HOST_IN)
_F, _B, _I, _W, _SO, _SI = Kind.F, Kind.B, Kind.I, Kind.W, Kind.SO, Kind.SI

Has = Callable[[Action], bool]   # whether the schedule has an action


def _waits_forward(s: int, x: int, has: Has, num_stages: int) -> tuple[Action, ...]:
    return (action(s - 1, _F, x),) if s > 0 else ()


def _waits_backward(s: int, x: int, has: Has, num_stages: int) -> tuple[Action, ...]:
    deps = [action(s, _F, x)]
    if s < num_stages - 1:
        up = action(s + 1, _I, x)
        deps.append(up if has(up) else action(s + 1, _B, x))
    swap_in = action(s, _SI, x)
    if has(swap_in):
        deps.append(swap_in)
    return tuple(deps)


def _waits_weight_grad(s: int, x: int, has: Has, num_stages: int) -> tuple[Action, ...]:
    half = action(s, _I, x)
    return (half if has(half) else action(s, _B, x),)


def _waits_swap_out(s: int, x: int, has: Has, num_stages: int) -> tuple[Action, ...]:
    return (action(s, _F, x),)


def _waits_swap_in(s: int, x: int, has: Has, num_stages: int) -> tuple[Action, ...]:
    return (action(s, _SO, x),)


@dataclass(frozen=True)
class StagePrice:
    """What the duration column reads for one stage: its costs, whether it
    recomputes, its swap fraction."""
    costs: StageCosts
    stage: int
    adjusted: bool
    swap_fraction: float

    @property
    def recompute(self) -> float:
        return self.costs.recompute[self.stage] if self.adjusted else 0.0


def _forward_time(st: StagePrice) -> float:
    return st.costs.fwd[st.stage] + st.costs.action_overhead


def _backward_time(st: StagePrice) -> float:
    return (st.costs.bwd[st.stage] + st.recompute) + st.costs.action_overhead


def _input_grad_time(st: StagePrice) -> float:
    return (st.costs.input_grad_time(st.stage) + st.recompute) + st.costs.action_overhead


def _weight_grad_time(st: StagePrice) -> float:
    return st.costs.weight_grad_time(st.stage) + st.costs.action_overhead


def _swap_time(st: StagePrice) -> float:
    return st.costs.swap_time(st.stage, st.swap_fraction, st.adjusted)


@dataclass(frozen=True)
class KindRule:
    """One row of the table. `recomputes`: its duration holds the stage's recompute
    (`priced`'s recompute part); `memory`: (start or end, effect) in the order the fold
    applies them (schedules.memory names the effects); `inbox`: what the action does
    to its own stage's inbox ("take_input", "take_grad", "release_grad") and at which
    end. Every message an action sends is put into its consumer's inbox."""
    kind: Kind
    waits: Callable[[int, int, Has, int], tuple[Action, ...]]
    lane: str
    duration: Callable[[StagePrice], float]
    recomputes: bool                       # the duration holds the stage's recompute
    memory: tuple[tuple[str, str], ...]
    inbox: tuple[tuple[str, str], ...] = ()


KINDS: dict[Kind, KindRule] = {
    _F: KindRule(_F, _waits_forward, COMPUTE, _forward_time, False, (("start", "alloc"),),
                 (("start", "take_input"),)),
    _B: KindRule(_B, _waits_backward, COMPUTE, _backward_time, True, (("end", "free"),),
                 (("end", "take_grad"),)),
    _I: KindRule(_I, _waits_backward, COMPUTE, _input_grad_time, True, (("start", "remat"), ("end", "input_grad"))),
    _W: KindRule(_W, _waits_weight_grad, COMPUTE, _weight_grad_time, False, (("end", "free"),),
                 (("end", "release_grad"),)),
    _SO: KindRule(_SO, _waits_swap_out, HOST_OUT, _swap_time, False, (("end", "swap_out"),)),
    _SI: KindRule(_SI, _waits_swap_in, HOST_IN, _swap_time, False, (("start", "swap_in"),)),
}
LANE_OF: dict[Kind, str] = {k: r.lane for k, r in KINDS.items()}
COMPUTE_KINDS: tuple[Kind, ...] = tuple(k for k, r in KINDS.items() if r.lane == COMPUTE)   # F, B, I, W


def effective_kind(kind: Kind, split: bool) -> Kind:
    """The row an action reads: a B whose micro-batch has a W (`split`) is an I."""
    return _I if kind is _B and split else kind


def split_blocks(actions) -> set[tuple[int, int]]:
    """(stage, micro-batch) of every split backward (those with a W)."""
    return {(a[0], a[2]) for a in actions if a[1] is _W}


def swapping_stages(stages) -> tuple[bool, ...]:
    """Per stage (StageSpecs): whether it swaps, so its copies share its p2p links:
    a swap fraction, and swap blocks or SOs in its order."""
    return tuple(spec.swap_fraction > 0 and (spec.swap_blocks > 0 or any(a.kind is _SO for a in spec.actions))
                 for spec in stages)


def boundary_lags(costs: StageCosts, swapping: Sequence[bool]) -> list[float]:
    """p2p_time of each boundary s -> s+1, shared when a stage at either end swaps."""
    p = costs.num_stages
    return [costs.p2p_time(s, swapping[s] or (s + 1 < p and swapping[s + 1])) for s in range(p)]


@dataclass(frozen=True)
class Structure:
    """What a run's actions are, apart from any costs: every action (device rows
    concatenated), its effective kind and lane, its inputs (index, boundary crossed
    or -1 on its own device), the devices its placement wakes, overlapped pairs."""
    actions: tuple[Action, ...]
    kind: tuple[Kind, ...]
    rows: tuple[tuple[int, ...], ...]          # per device: its action indices in row order
    device_of: tuple[int, ...]
    lane: tuple[str, ...]
    deps: tuple[tuple[tuple[int, int], ...], ...]
    woken: tuple[tuple[int, ...], ...]         # other devices whose actions wait on it
    pair: dict[int, int]                       # overlapped: first -> second


@dataclass(frozen=True)
class Priced:
    """The table applied to one run under one StageCosts: its Structure's fields,
    and each action's duration and recompute part, each boundary's transfer time
    (`lag[b]`; `lag[-1]` = 0: an input from the same device). What the list
    scheduler runs."""
    actions: tuple[Action, ...]
    kind: tuple[Kind, ...]
    rows: tuple[tuple[int, ...], ...]
    device_of: tuple[int, ...]
    lane: tuple[str, ...]
    deps: tuple[tuple[tuple[int, int], ...], ...]
    woken: tuple[tuple[int, ...], ...]
    pair: dict[int, int]
    dur: list[float]
    rec: list[float]                           # recompute part of a B or I
    lag: list[float]

    @property
    def num_devices(self) -> int:
        return len(self.rows)


_STRUCTURES: "OrderedDict[tuple, Structure]" = OrderedDict()


def structure(rows: Sequence[Sequence[Action]], num_stages: int, stage_to_device: Sequence[int],
              overlapped: Sequence[tuple[Action, Action]] = ()) -> Structure:
    """The Structure of `rows` (per device, in row order), remembered for the last
    few rows asked for: a search prices one order under many costs. An input the
    rows do not hold is not waited on (a validated schedule holds them all; a
    measured run's events may cover a part)."""
    key = (num_stages, tuple(stage_to_device), tuple(map(tuple, rows)), tuple(overlapped))
    found = _STRUCTURES.get(key)
    if found is None:
        found = _STRUCTURES[key] = _build(*key)
        if len(_STRUCTURES) > 64:
            _STRUCTURES.popitem(last=False)
    else:
        _STRUCTURES.move_to_end(key)
    return found


def _build(num_stages, where, rows, overlapped) -> Structure:
    actions = tuple(a for row in rows for a in row)
    index = {a: i for i, a in enumerate(actions)}
    split = split_blocks(actions)
    device_of, ids, first = [], [], 0
    for d, row in enumerate(rows):
        ids.append(tuple(range(first, first + len(row))))
        device_of.extend([d] * len(row))
        first += len(row)
    kinds, lanes, deps = [], [], []
    has = index.__contains__
    for s, k, x in actions:
        rule = KINDS[effective_kind(k, (s, x) in split)]
        kinds.append(rule.kind)
        lanes.append(rule.lane)
        deps.append(tuple((index[dep], -1 if dep[0] == s or where[dep[0]] == where[s] else min(dep[0], s))
                          for dep in rule.waits(s, x, has, num_stages) if dep in index))
    woken: list[set[int]] = [set() for _ in actions]
    for i, on in enumerate(deps):
        for j, _ in on:
            if device_of[j] != device_of[i]:
                woken[j].add(device_of[i])
    return Structure(actions, tuple(kinds), tuple(ids), tuple(device_of), tuple(lanes), tuple(deps),
                     tuple(tuple(sorted(w)) for w in woken), {index[a]: index[b] for a, b in overlapped})


def priced(rows: Sequence[Sequence[Action]], num_stages: int, stage_to_device: Sequence[int],
           stages: Sequence[StagePrice], lags: Sequence[float],
           overlapped: Sequence[tuple[Action, Action]] = ()) -> Priced:
    """Apply the table to `rows` (per device; every action of the run, in each
    device's row order). `stages[s]` prices stage s; `lags[s]` is boundary s's
    transfer time (boundary_lags)."""
    st = structure(rows, num_stages, stage_to_device, overlapped)
    table = [{k: r.duration(price) for k, r in KINDS.items()} for price in stages]
    recompute = [price.recompute for price in stages]
    recomputing = {k for k, r in KINDS.items() if r.recomputes}
    dur = [table[a[0]][k] for a, k in zip(st.actions, st.kind)]
    rec = [recompute[a[0]] if k in recomputing else 0.0 for a, k in zip(st.actions, st.kind)]
    return Priced(st.actions, st.kind, st.rows, st.device_of, st.lane, st.deps, st.woken, st.pair, dur, rec,
                  [*lags, 0.0])
