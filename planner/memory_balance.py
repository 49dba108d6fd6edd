"""A partition that evens the devices' peaks: boundary shifts judged by the simulator.

The even partition balances time. Memory it does not: a 1F1B stage 0 holds p
micro-batches of activations and the last stage one; under a V schedule (ZB-V,
V-Half, V-Min) device 0 holds the first chunk and the last, so the embedding's and
the head's weights (with their gradients and optimizer state) sit on one device,
and a device's first chunk holds more micro-batches in flight than its second.
Moving units toward chunks that hold fewer lets a family run with less recompute
where the even partition leaves one device over the limit.

    chunks:   c0 | c1 | c2 | c3 || c4 | c5 | c6 | c7        (p = 4, V = 2)
    device:   0    1    2    3     3    2    1    0
    a move:   boundaries c0|c1 .. c6|c7 one unit left: c0 gives a unit, c7 takes one,
              every chunk between passes one on (device 0's units leave its full chunk
              for its emptier one)

Each step tries every run of consecutive boundaries that moves units of a device
over the target, shifted by one unit either way (a chunk keeps at least one unit),
evaluated on the same order with the new partition's costs
(planner.family_search.evaluate: the order is the family's and valid for any
costs). Of the runs that raise no device above both the largest peak so far and
the target, it keeps the one with the least excess over the target summed over
devices (a device under the target has room: its excess is 0), then the lowest
peaks read largest first, then the shorter makespan. It stops when every device is
within the target, when no move helps, or after MAX_MOVES_PER_CHUNK moves per chunk. The family
search (planner.families) offers `balanced`: the family's order with nothing
recomputed on the partition balanced for the limit, where the even one needs at
most BALANCE_REACH over it.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Callable

from planner.costs import Partition
from planner.family_search import evaluate
from planner.search import Evaluation

MAX_MOVES_PER_CHUNK = 2     # the cap: past a few units per chunk the time lost outweighs the memory
BALANCE_REACH = 0.10        # tried where the even partition needs at most this share over the limit
MAX_CHUNKS = 16             # and has at most this many chunks: a move tries ~chunks^2 runs, each simulated


@dataclass(frozen=True)
class Balanced:
    partition: Partition
    evaluation: Evaluation       # the order on `partition` with the given sets
    moves: tuple[tuple[tuple[int, int], ...], ...]   # per move: (boundary, +1 right / -1 left) shifted together


def shifted(partition: Partition, boundary: int, step: int) -> Partition | None:
    """`partition` with the boundary after chunk `boundary` moved by `step` units
    (None if a chunk would be left empty)."""
    cut = partition[boundary][1] + step
    if not partition[boundary][0] < cut < partition[boundary + 1][1]:
        return None
    out = list(partition)
    out[boundary] = (partition[boundary][0], cut)
    out[boundary + 1] = (cut, partition[boundary + 1][1])
    return tuple(out)


def balance_memory(judge: Callable[[Partition], Evaluation], partition: Partition, target: float,
                   stage_to_device) -> Balanced:
    """Shift runs of chunk boundaries from `partition` until every device peak is at
    most `target` or no move lowers them (module docstring). `judge`: a partition's
    evaluation (the family's order, each stage's recompute set, on that partition);
    a run is tried where it moves units of a device over the target."""
    # a move's runs meet partitions an earlier move tried (a unit moved back, or two
    # runs ending alike): each is simulated once
    judge_once = functools.cache(judge)

    def key(ev: Evaluation) -> tuple:
        return (sum(max(0.0, pk - target) for pk in ev.peaks),) + tuple(sorted(ev.peaks, reverse=True))

    def runs(over: set) -> list:
        n = len(partition) - 1
        return [tuple((k, step) for k in range(b, c + 1)) for b in range(n) for c in range(b, n) for step in (-1, 1)
                if over.intersection(stage_to_device[b:c + 2])]

    def moved(part: Partition, run) -> Partition | None:
        # each chunk of the run keeps its size: pass the unit on from the side it leaves
        for b, step in (run if run[0][1] < 0 else run[::-1]):
            part = part and shifted(part, b, step)
        return part

    best, moves = judge_once(partition), []
    for _ in range(MAX_MOVES_PER_CHUNK * len(partition)):
        peak = max(best.peaks)
        if peak <= target:
            break
        over = {d for d, pk in enumerate(best.peaks) if pk > target}
        tried = [(key(ev), ev.makespan, run, ev) for run in runs(over)
                 if (part := moved(best.config.partition, run)) is not None
                 and max((ev := judge_once(part)).peaks) <= max(peak, target)]
        if not tried:
            break
        low, _, run, ev = min(tried, key=lambda t: t[:2])
        if low >= key(best):
            break
        best = ev
        moves.append(run)
    return Balanced(best.config.partition, best, tuple(moves))


def balanced(order, unlimited: Evaluation) -> Evaluation | None:
    """The family's order with nothing recomputed on a partition balanced for the
    limit, where the even partition (`unlimited`: its evaluation) needs more than
    the limit on some device but at most BALANCE_REACH more, on at most MAX_CHUNKS
    chunks; None where it fits already, is out of reach, or no balanced partition fits. `order`:
    planner.family_search's order under search."""
    limit = order.setting.memory_limit
    if unlimited.fits or max(unlimited.peaks) > limit * (1 + BALANCE_REACH):
        return None
    nothing = (frozenset(),) * len(order.partition)
    if len(order.partition) > MAX_CHUNKS:
        return None
    found = balance_memory(lambda part: evaluate(order.setting, unlimited.schedule, part, nothing,
                                                 order.virtual_stages), order.partition, limit,
                           unlimited.schedule.stage_to_device)
    return found.evaluation if found.evaluation.fits else None
