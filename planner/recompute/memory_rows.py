"""A device's memory over its order, as linear rows in its stages' kept bytes.

The one memory fold (schedules.memory.order_memory) runs along a device's row at
positions, not times: its level after each action depends on the bytes each stage
keeps per micro-batch, and on nothing else the recompute choice changes. Over an
order the fold is linear in those bytes: a block allocates its stage's kept bytes
at its F, loses beta of them at its SO and gets them back at its SI; at its I it
holds what the stage keeps with nothing recomputed (the rematerialised share comes
back), then what its W reads; W (or B) frees it. So the level after action i is

    level_i = sum over the device's stages c of  n_c(i) * kept_c  +  K(i)

where n_c(i) counts stage c's resident blocks (a swapped one as 1 - beta) and K(i)
collects what no choice changes (blocks inside or after their I). `device_rows`
finds n and K by folding the row once per stage with kept_c = 1 and once with every
kept at 0, and keeps only the rows no other row dominates: the peak for ANY kept
bytes is the largest row. The choice of a device's recompute sets is then a small
exact problem (planner.device_choice).

The fold over an order has no inbox and takes each action as done at its place; the
simulator's timeline may see more (an activation received early, a swap still
copying). The search simulates every choice and tightens a device found over the
limit (planner.family_search), as the recompute IP's search does.
"""
from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass, replace
from typing import Sequence

from schedules import Schedule, StageCosts
from schedules.memory import StageMemory, order_memory
from schedules.simulator import stage_memory


@dataclass(frozen=True)
class MemoryRows:
    """Device d's level after each action of its order, as rows (coefficients per
    stage in `stages` order, constant bytes); the peak is the largest row."""
    device: int
    stages: tuple[int, ...]
    rows: tuple[tuple[tuple[float, ...], float], ...]

    def peak(self, kept: Sequence[float]) -> float:
        """The fold's peak for these kept bytes per micro-batch (one per stage in `stages`)."""
        return max((sum(c * k for c, k in zip(coef, kept)) + const for coef, const in self.rows), default=0.0)


def device_rows(schedule: Schedule, costs: StageCosts, device: int) -> MemoryRows:
    """Rows of `device` under `schedule` (its swaps and split backwards) and `costs`
    (whose held bytes, remat and no-recompute kept bytes are the constants)."""
    row = schedule.rows[device]
    stages = tuple(schedule.stages_on(device))
    real = stage_memory(schedule, costs)
    const = {s: replace(real[s], kept=0.0, remat=costs.act_bytes[s]) for s in stages}
    runs = [order_memory(row, _Only(const)).steps]
    for c in stages:
        basis = {s: StageMemory(kept=1.0 if s == c else 0.0, swap_fraction=real[s].swap_fraction,
                                remat=-1.0 if s == c else 0.0,
                                held_for_weight_grad=0.0 if real[s].held_for_weight_grad is not None else None,
                                freed_by_input_grad=0.0)
                 for s in stages}
        runs.append(order_memory(row, _Only(basis)).steps)
    times = sorted({t for steps in runs for t, _ in steps})
    table = [[_at(steps, t) for steps in runs] for t in times]
    rows = {}
    for values in table:
        coef = tuple(round(v, 12) for v in values[1:])
        rows[coef] = max(rows.get(coef, float("-inf")), values[0])
    return MemoryRows(device, stages, _undominated(rows))


class _Only:
    """StageMemory by stage for the stages of one device (schedules.memory indexes by stage)."""

    def __init__(self, by_stage: dict[int, StageMemory]) -> None:
        self.by_stage = by_stage

    def __getitem__(self, s: int) -> StageMemory:
        return self.by_stage[s]


def _at(steps, t: float) -> float:
    """The step function's value at time t (after every event at t)."""
    i = bisect_right(steps, (t, float("inf"))) - 1
    return steps[i][1] if i >= 0 else 0.0


def _undominated(rows: dict) -> tuple:
    """The rows whose coefficients and constant no other row meets or exceeds everywhere."""
    items = sorted(rows.items(), key=lambda kv: (-sum(kv[0]), -kv[1]))
    out: list = []
    for coef, const in items:
        if not any(all(a >= b for a, b in zip(c2, coef)) and k2 >= const for c2, k2 in out):
            out.append((coef, const))
    return tuple(out)
