"""Discrete-event simulation of a schedule under a StageCosts cost model.

Every stage has three resources: its compute stream (F, B, W, in list order), its
host-out link (SO, one at a time) and its host-in link (SI, one at a time); the
links are full duplex and share nothing with compute. An action starts at the
latest of:
  F(s,x)   previous compute op of stage s ends; F(s-1,x) ends + p2p(s-1)
  B(s,x)   previous compute op ends; F(s,x) ends; B(s+1,x) ends + p2p(s);
           SI(s,x) ends when the block was swapped
  W(s,x)   previous compute op ends (B(s,x) precedes it in the list)
  SO(s,x)  F(s,x) ends; the host-out link is free; the compute op listed before
           it has ended (a swap is issued once the stage reached its place)
  SI(s,x)  SO(s,x) ends; the host-in link is free; the compute op listed before it
           has ended; the SO listed before it has ended ("evict one block before
           loading one", so the resident level never rises during eviction-loading)
Durations: F = fwd; B = bwd (+ recompute on adjusted stages; minus the
weight-gradient share when a W of the same micro-batch exists); W = that share;
SO/SI = swap_fraction * kept bytes / host bandwidth.

Because each resource runs its actions in list order, every start time is the
longest path to it in the dependency graph; the simulator walks stages in
dependency order and needs no event queue.
"""
from __future__ import annotations

from schedules.costs import StageCosts
from schedules.errors import ScheduleError
from schedules.ir import Action, Kind, Schedule
from schedules.timeline import OpRecord, Timeline
from schedules.validator import validate


def op_times(schedule: Schedule, costs: StageCosts) -> dict[Action, tuple[float, float, float]]:
    """(start, end, recompute part) of every action."""
    validate(schedule)
    p = schedule.num_stages
    if costs.num_stages != p:
        raise ScheduleError(f"costs describe {costs.num_stages} stages, schedule {schedule.name!r} has {p}")
    has_w = {(a.stage, a.microbatch) for s in range(p) for a in schedule.actions(s) if a.kind == Kind.W}
    times: dict[Action, tuple[float, float, float]] = {}
    rows = [schedule.actions(s) for s in range(p)]
    ptr = [0] * p
    compute_end = [0.0] * p     # end of the last compute op issued on the stage
    out_free = [0.0] * p
    in_free = [0.0] * p
    last_so_end = [0.0] * p
    remaining = sum(len(r) for r in rows)
    while remaining:
        progressed = False
        for s in range(p):
            spec = schedule.stages[s]
            while ptr[s] < len(rows[s]):
                a = rows[s][ptr[s]]
                ready = _ready_time(a, times, p, costs)
                if ready is None:
                    break
                x = a.microbatch
                rec = 0.0
                if a.kind in (Kind.F, Kind.B, Kind.W):
                    start = max(ready, compute_end[s])
                    if a.kind == Kind.F:
                        dur = costs.fwd[s]
                    elif a.kind == Kind.B:
                        rec = costs.recompute[s] if spec.adjusted else 0.0
                        share = costs.weight_grad_fraction if (s, x) in has_w else 0.0
                        dur = costs.bwd[s] * (1.0 - share) + rec
                    else:
                        dur = costs.bwd[s] * costs.weight_grad_fraction
                    compute_end[s] = start + dur
                else:
                    dur = costs.swap_time(s, spec.swap_fraction, spec.adjusted)
                    if a.kind == Kind.SO:
                        start = max(ready, out_free[s], compute_end[s])
                        out_free[s] = last_so_end[s] = start + dur
                    else:
                        start = max(ready, in_free[s], compute_end[s], last_so_end[s])
                        in_free[s] = start + dur
                times[a] = (start, start + dur, rec)
                ptr[s] += 1
                remaining -= 1
                progressed = True
        if not progressed:  # validate() rules this out; keep the loop honest anyway
            raise ScheduleError(f"schedule {schedule.name!r} cannot make progress")
    return times


def _ready_time(a: Action, times, p: int, costs: StageCosts) -> float | None:
    """When a's data dependencies are satisfied; None if one has not been simulated yet."""
    s, x = a.stage, a.microbatch
    deps: list[tuple[Action, float]] = []
    if a.kind == Kind.F:
        if s > 0:
            deps.append((Action(s - 1, Kind.F, x), costs.p2p_time(s - 1)))
    elif a.kind == Kind.B:
        deps.append((Action(s, Kind.F, x), 0.0))
        if s < p - 1:
            deps.append((Action(s + 1, Kind.B, x), costs.p2p_time(s)))
        si = Action(s, Kind.SI, x)
        if si in times:
            deps.append((si, 0.0))
    elif a.kind == Kind.W:
        deps.append((Action(s, Kind.B, x), 0.0))
    elif a.kind == Kind.SO:
        deps.append((Action(s, Kind.F, x), 0.0))
    else:
        deps.append((Action(s, Kind.SO, x), 0.0))
    t = 0.0
    for d, lag in deps:
        if d not in times:
            return None
        t = max(t, times[d][1] + lag)
    return t


def simulate(schedule: Schedule, costs: StageCosts) -> Timeline:
    """Simulate `schedule` under `costs` and derive every statistic (see timeline.py)."""
    times = op_times(schedule, costs)
    ops = [OpRecord.of(a, *times[a]) for s in range(schedule.num_stages) for a in schedule.actions(s)]
    p = schedule.num_stages
    kept = tuple(costs.kept_bytes(s, schedule.stages[s].adjusted) for s in range(p))
    beta = tuple(schedule.stages[s].swap_fraction for s in range(p))
    return Timeline.from_ops(p, ops, kept, beta, name=schedule.name, origin=0.0)
