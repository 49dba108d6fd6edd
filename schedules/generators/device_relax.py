"""Dependency relaxation of any schedule (chunks, split backwards): the device rows
Obscura on interleaved 1F1B and on ZB-H1 run (generators/obscura_on.py).

List scheduling under a cost model (schedules.scheduling.list_schedule, with the per-kind
table priced for the base schedule: durations with action_overhead, transfers with
link sharing next to a stage whose settings swap): devices not capped keep their
row; a capped device, whenever it is free, runs the first action of its row (in
the row's order) whose inputs have arrived, keeping each stage's forwards,
backward-input steps and weight-grads in micro-batch order, and starting a forward
only while fewer than its cap of blocks (stage, micro-batch) are held (forwarded,
not yet freed by their W, or B). A late backward thus lets a later forward or a W
move left into its bubble. The simulator, which runs the same loop with every row
in order, gives the relaxed rows the relaxation's own makespan.

`DeviceRelaxation(base, costs)` prices the base once and relaxes under any caps:
the cap search (generators/caps.py) runs it dozens of times per schedule, each
trial from the last run that met its target (generators/relaxation.py).
"""
from __future__ import annotations

import math
from typing import Mapping

from schedules.actions import COMPUTE_KINDS
from schedules.costs import StageCosts
from schedules.errors import ScheduleError
from schedules.ir import Action, Kind, Schedule
from schedules.generators.relaxation import CappedRun
from schedules.scheduling.list_schedule import Relaxed, list_schedule
from schedules.simulator import price_schedule

_QUEUE = {Kind.F: "F", Kind.B: "BI", Kind.I: "BI", Kind.W: "W"}


class DeviceRelaxation:
    """The relaxation of `base` (compute actions only: swaps are added after) under
    `costs`; call it with caps {device: blocks}."""

    def __init__(self, base: Schedule, costs: StageCosts, merge_forwards: bool = False) -> None:
        """`merge_forwards`: a device's forwards of all its stages are one queue, in
        row order (a later chunk's forward never overtakes an earlier one's)."""
        if any(a.kind not in COMPUTE_KINDS for row in base.rows for a in row):
            raise ScheduleError("device relaxation: rows may hold compute actions only (add swaps afterwards)")
        self.run = price_schedule(base, costs)
        self.queues = []          # per device: (stage, F / B-or-I / W) queues of action indices, in row order
        for ids in self.run.rows:
            by_queue: dict[tuple, list[int]] = {}
            for i in ids:
                a = self.run.actions[i]
                key = "F" if merge_forwards and a.kind is Kind.F else (a.stage, _QUEUE[a.kind])
                by_queue.setdefault(key, []).append(i)
            self.queues.append(tuple(tuple(q) for q in by_queue.values()))
        self.relax = CappedRun(self.run, dict(enumerate(self.queues)), alternate=False)

    def __call__(self, caps: dict[int, float], limit: float = math.inf,
                 sizes: Mapping[Action, tuple[float, float]] | None = None, fits: frozenset = frozenset()
                 ) -> tuple[list[list[Action]], float] | None:
        """(rows, makespan: what the simulator gives them under the same costs), or
        None if the caps deadlock, or once the makespan is sure to exceed `limit`
        (a device's remaining work cannot end by then). `sizes` (every action of
        the capped devices -> (rise, net)) counts the caps in those units (e.g.
        bytes) instead of blocks; `fits`: kinds that start only in a gap they fit
        (both: schedules.scheduling.list_schedule.Relaxed). Block caps start from a remembered
        run (CappedRun); byte caps run whole."""
        if sizes is None and not fits:
            done = self.relax.timed(caps, limit)
            if not done.complete:
                return None
            return self.relax.rows(done), done.makespan
        acts = self.run.actions
        by_index = {i: sizes[a] for i, a in enumerate(acts) if a in sizes} if sizes is not None else None
        done = list_schedule(self.run, {d: Relaxed(self.queues[d], cap, sizes=by_index, fits=fits)
                                        for d, cap in caps.items()}, limit, tail=self.relax.tail)
        if not done.complete:
            return None
        return [[acts[i] for i in ids] for ids in done.order], done.makespan
