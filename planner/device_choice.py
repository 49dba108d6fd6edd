"""Each device's recompute sets: the least recompute time that fits its memory.

A device runs V stages (chunks); each has its efficient choices
(planner.recompute.recompute_options: recompute time up, kept bytes down). Under a fixed
order the device's peak is its fold's largest row (planner.recompute.memory_rows) at the
chosen kept bytes, plus the largest rematerialisation working set among its stages:

    minimise   sum over its stages of time(choice)          (then fewer ops, then less memory)
    such that  max over rows of (n . kept(choice) + K) + max work(choice) <= room

where room is the limit less the device's weights and whatever the fold does not
see (the search's margin). Devices are independent here: a device's recompute only
lengthens its own backwards, so under a fixed order the makespan cannot shorten by
recomputing more anywhere, and each device taking its least is what the simulator
then judges (planner.family_search). The search is exact: depth-first over the
stages' choices in time order, cut where the time so far cannot beat the best or
where even the leanest remaining choices cannot fit. A device with more
combinations than ENUMERATE (four chunks with long fronts) is chosen greedily
(`_greedy`): the best trade of recompute time for peak bytes, step by step.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from planner.recompute.memory_rows import MemoryRows
from planner.recompute.recompute_options import Option

ENUMERATE = 4096   # combinations searched depth-first at once; a device with more starts from the greedy
NODES = 20_000     # ... and its depth-first search stops after this many nodes


@dataclass(frozen=True)
class DeviceChoice:
    options: tuple[Option, ...]    # one per stage of the device, in MemoryRows.stages order
    peak: float                    # fold peak + working set at these choices

    @property
    def time(self) -> float:
        return sum(o.time for o in self.options)


def _rank(options: Sequence[Option], peak: float) -> tuple:
    return (round(sum(o.time for o in options), 15), sum(len(o.recompute) for o in options), peak)


def choose_device(rows: MemoryRows, options: Sequence[Sequence[Option]], room: float,
                  allowed=None) -> DeviceChoice | None:
    """The fastest choice per stage whose peak is at most `room` (None: none fits).
    `options[i]` are stage rows.stages[i]'s choices; `allowed(i, option)` filters
    them (e.g. a swapped block must hide)."""
    opts = [[o for o in opt if allowed is None or allowed(i, o)] for i, opt in enumerate(options)]
    if any(not o for o in opts):
        return None
    incumbent = None
    budget = None
    if math.prod(len(o) for o in opts) > ENUMERATE:
        incumbent = _greedy(rows, opts, room)
        if incumbent is None:
            return None
        budget = NODES
    return _depth_first(rows, opts, room, incumbent, budget)


def _depth_first(rows: MemoryRows, opts: list[list[Option]], room: float, incumbent: DeviceChoice | None,
                 budget: int | None) -> DeviceChoice | None:
    """The search over every combination, fastest choices first, cut by the best
    time so far (from `incumbent`, if any) and by what the leanest remaining choices
    need; after `budget` nodes (None: no limit) the best found so far."""
    lean = [min(o.kept for o in opt) for opt in opts]
    lean_work = [min(o.work for o in opt) for opt in opts]
    best: list = [None, incumbent]      # (rank, DeviceChoice)
    if incumbent is not None:
        best[0] = _rank(incumbent.options, incumbent.peak)
    n = len(opts)
    nodes = [0]

    def peak_of(chosen: list[Option]) -> float:
        kept = [o.kept for o in chosen]
        return rows.peak(kept) + max((o.work for o in chosen), default=0.0)

    def visit(i: int, chosen: list[Option], t: float) -> None:
        nodes[0] += 1
        if best[0] is not None and (t > best[0][0] + 1e-15 or (budget is not None and nodes[0] > budget)):
            return
        partial = [o.kept for o in chosen] + lean[i:]
        work = max([o.work for o in chosen] + lean_work[i:], default=0.0)
        if rows.peak(partial) + work > room:
            return
        if i == n:
            pk = peak_of(chosen)
            r = _rank(chosen, pk)
            if best[0] is None or r < best[0]:
                best[0], best[1] = r, DeviceChoice(tuple(chosen), pk)
            return
        for o in opts[i]:
            visit(i + 1, chosen + [o], t + o.time)

    visit(0, [], 0.0)
    return best[1]


def leanest(rows: MemoryRows, options: Sequence[Sequence[Option]]) -> DeviceChoice:
    """The choice with the least peak (each stage its fewest kept bytes): what the
    device needs at least under this order, for 'does not fit, needs X'."""
    chosen = [min(opt, key=lambda o: (o.kept, o.work, o.time)) for opt in options]
    return DeviceChoice(tuple(chosen), rows.peak([o.kept for o in chosen])
                        + max((o.work for o in chosen), default=0.0))


def fastest(rows: MemoryRows, options: Sequence[Sequence[Option]]) -> DeviceChoice:
    """The choice with no memory limit: each stage its fastest option."""
    return choose_device(rows, options, math.inf)


def _greedy(rows: MemoryRows, opts: list[list[Option]], room: float) -> DeviceChoice | None:
    """choose_device's problem for a device with many combinations: from every stage
    at its fastest choice, while the device does not fit, take the step (one stage
    to a leaner choice) that lowers the bytes over the room (summed over the fold's
    rows) most per second of recompute it adds;
    then give back, largest saving first, every step the device can do without.
    Not exact, but each step is the best trade of time for memory along the fronts."""
    coef = np.array([c for c, _ in rows.rows], dtype=float).reshape(len(rows.rows), len(opts))
    const = np.array([k for _, k in rows.rows], dtype=float)
    kept = [np.array([o.kept for o in opt]) for opt in opts]
    work = [np.array([o.work for o in opt]) for opt in opts]
    times = [np.array([o.time for o in opt]) for opt in opts]
    pick = [0] * len(opts)

    def levels(choice) -> np.ndarray:
        k = np.array([kept[i][j] for i, j in enumerate(choice)])
        return coef @ k + const + max(work[i][j] for i, j in enumerate(choice))

    def peak(choice) -> float:
        return float(levels(choice).max(initial=0.0))

    def excess(choice) -> float:
        """How far the device is over, summed over its rows: every binding row counts,
        so a step that lowers one of several equal peaks still shows."""
        return float(np.clip(levels(choice) - room, 0.0, None).sum())

    over = excess(pick)
    while over > 0:
        best = None
        for i in range(len(opts)):
            for j in range(pick[i] + 1, len(opts[i])):
                trial = pick[:i] + [j] + pick[i + 1:]
                gain = over - excess(trial)
                if gain <= 0:
                    continue
                score = gain / max(times[i][j] - times[i][pick[i]], 1e-12)
                if best is None or score > best[0]:
                    best = (score, trial)
        if best is None:
            return None
        pick = best[1]
        over = excess(pick)
    improved = True
    while improved:
        improved = False
        for i in sorted(range(len(opts)), key=lambda i: -times[i][pick[i]]):
            for j in range(pick[i]):
                trial = pick[:i] + [j] + pick[i + 1:]
                if peak(trial) <= room:
                    pick, improved = trial, True
                    break
    chosen = tuple(opts[i][j] for i, j in enumerate(pick))
    return DeviceChoice(chosen, peak(pick))
