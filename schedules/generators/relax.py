"""Dependency relaxation of Obscura on 1F1B: orders built by list scheduling under a
cost model.

`relaxed_rows` (one stage per device, F and B only) is the paper's policy: a
relaxed stage alternates forward and backward and swaps the two when the preferred
one is late. (device_relax.py relaxes any schedule, chunks and split backwards: a
relaxed device runs the first action of its given row whose inputs are there.)
Both are the one list scheduler (schedules.scheduling.list_schedule) with a chooser of their
own, over the per-kind table (schedules.actions). `StageRelaxation` is relaxed_rows
priced once for the cap search, whose trials start from the last run that met the
target (generators/relaxation.py).

relaxed_rows:

A relaxed stage, whenever it is free, prefers the kind it did not run last (1:1
interleaving of forwards and backwards, as 1F1B, so downstream stages keep getting
forwards and memory stays bounded). If the preferred op's input has not arrived
it runs the other kind instead: a later forward moves left into the bubble before
a backward that is still waiting (and that backward moves right), provided fewer
than `cap` micro-batches are in flight. Warm-up is the same rule from the start:
forwards until the first gradient arrives or the cap is reached.
Other stages keep their given order. Times are not stored: the output is a plain
static order, and the simulator recomputes times under any cost model. With the
same costs and settings, the simulated times equal the ones computed here (the
same loop and table, every row then in order), so the returned makespan can steer
searches.
"""
from __future__ import annotations

import math
from dataclasses import replace
from typing import Sequence

from schedules.actions import StagePrice, boundary_lags, priced
from schedules.costs import StageCosts
from schedules.errors import ScheduleError
from schedules.ir import Action, Kind
from schedules.generators.relaxation import CappedRun
from schedules.scheduling.list_schedule import list_schedule


class StageRelaxation:
    """relaxed_rows for one set of fixed orders, costs and swapping stages, priced
    once: call it with caps (the cap search does, dozens of times; its trials start
    from the last run that met the target: generators/relaxation.py)."""

    def __init__(self, num_stages: int, num_microbatches: int, fixed: dict[int, list[Action]], caps_of,
                 costs: StageCosts, adjusted, swapping: Sequence[int] = ()) -> None:
        p, m = num_stages, num_microbatches
        if set(fixed) | set(caps_of) != set(range(p)) or set(fixed) & set(caps_of):
            raise ScheduleError("relaxed_rows: every stage needs exactly one of a fixed order or a cap")
        if any(a.kind not in (Kind.F, Kind.B) for row in fixed.values() for a in row):
            raise ScheduleError("relaxed_rows: fixed orders may hold only F and B actions")
        adjusted, swaps = set(adjusted), set(swapping)
        rows = [list(fixed[s]) if s in fixed else
                [Action(s, Kind.F, x) for x in range(m)] + [Action(s, Kind.B, x) for x in range(m)] for s in range(p)]
        run = priced(rows, p, range(p), [StagePrice(costs, s, s in adjusted, 0.0) for s in range(p)],
                     boundary_lags(costs, [s in swaps for s in range(p)]))
        self.p, self.m = p, m
        self.capped = frozenset(caps_of)
        self.relax = CappedRun(run, {s: (tuple(run.rows[s][:m]), tuple(run.rows[s][m:])) for s in caps_of},
                               alternate=True)

    def __call__(self, caps: dict[int, int], limit: float = math.inf) -> tuple[list[list[Action]], float]:
        if set(caps) != self.capped:
            raise ScheduleError("relaxed_rows: every stage needs exactly one of a fixed order or a cap")
        done = self.relax.timed(caps, limit)
        out = self.relax.rows(done)
        if done.past_limit or (not done.complete and math.isfinite(limit)):   # a deadlock cannot meet it either
            return out, math.inf
        if not done.complete:
            raise ScheduleError(f"relaxed_rows: placed {sum(map(len, out))} of {2 * self.m * self.p} actions "
                                "(the fixed orders deadlock)")
        return out, done.makespan

    def in_order(self, rows: Sequence[Sequence[Action]]) -> float:
        """relaxed_rows(p, m, rows, {}, ...)'s makespan: every stage issuing the given
        order of its F and B (the same actions, so the same table and loop)."""
        run = self.relax.run
        index = {a: i for i, a in enumerate(run.actions)}
        ids = tuple(tuple(index[a] for a in row) for row in rows)
        if sorted(i for row in ids for i in row) != list(range(len(run.actions))) or \
                any(run.device_of[i] != d for d, row in enumerate(ids) for i in row):
            raise ScheduleError("relaxed_rows: every stage's order must hold its F and B of every micro-batch")
        done = list_schedule(replace(run, rows=ids))
        if not done.complete:
            raise ScheduleError(f"relaxed_rows: placed {sum(map(len, done.order))} of {2 * self.m * self.p} "
                                "actions (the fixed orders deadlock)")
        return done.makespan


def relaxed_rows(num_stages: int, num_microbatches: int, fixed: dict[int, list[Action]],
                 caps: dict[int, int], costs: StageCosts, adjusted, limit: float = math.inf,
                 swapping: Sequence[int] = ()) -> tuple[list[list[Action]], float]:
    """Orders for all stages (fixed ones unchanged, the `caps` ones relaxed) and
    their makespan under `costs` (the per-kind table: adjusted stages' backwards
    include recompute, every compute action action_overhead; a link next to a stage
    in `swapping` keeps 1 - link_sharing of its bandwidth), which the simulator
    gives the same rows with those settings. With a finite `limit` it stops as
    soon as the makespan is sure to exceed it (a stage's remaining work cannot end
    by then), or deadlocks, and returns makespan inf."""
    return StageRelaxation(num_stages, num_microbatches, fixed, caps, costs, adjusted, swapping)(caps, limit)
