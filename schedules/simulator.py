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


def op_times(schedule: Schedule, costs: StageCosts, check: bool = True
             ) -> dict[Action, tuple[float, float, float]]:
    """(start, end, recompute part) of every action. `check=False` skips validation
    for callers that just generated the schedule (a search loop, say)."""
    if check:
        validate(schedule)
    p = schedule.num_stages
    if costs.num_stages != p:
        raise ScheduleError(f"costs describe {costs.num_stages} stages, schedule {schedule.name!r} has {p}")
    rows = [schedule.actions(s) for s in range(p)]
    has_w = {(a.stage, a.microbatch) for row in rows for a in row if a.kind == Kind.W}
    has_si = {(a.stage, a.microbatch) for row in rows for a in row if a.kind == Kind.SI}
    lag = [costs.p2p_time(s) for s in range(p)]
    end: dict[tuple[int, str, int], float] = {}    # (stage, kind value, micro-batch) -> end time
    times: dict[Action, tuple[float, float, float]] = {}
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
            row = rows[s]
            swap_dur = costs.swap_time(s, spec.swap_fraction, spec.adjusted)
            while ptr[s] < len(row):
                a = row[ptr[s]]
                k, x = a.kind.value, a.microbatch
                # data dependencies (see the module docstring)
                if k == "F":
                    dep = end.get((s - 1, "F", x)) if s > 0 else 0.0
                    ready = None if dep is None else dep + (lag[s - 1] if s > 0 else 0.0)
                elif k == "B":
                    ready = end.get((s, "F", x))
                    if ready is not None and s < p - 1:
                        dep = end.get((s + 1, "B", x))
                        ready = None if dep is None else max(ready, dep + lag[s])
                    if ready is not None and (s, x) in has_si:
                        ready = max(ready, end[(s, "SI", x)])
                elif k == "W":
                    ready = end.get((s, "B", x))
                elif k == "SO":
                    ready = end.get((s, "F", x))
                else:
                    ready = end.get((s, "SO", x))
                if ready is None:
                    break
                rec = 0.0
                if k == "F":
                    start = max(ready, compute_end[s])
                    dur = costs.fwd[s]
                    compute_end[s] = start + dur
                elif k == "B":
                    start = max(ready, compute_end[s])
                    rec = costs.recompute[s] if spec.adjusted else 0.0
                    share = costs.weight_grad_fraction if (s, x) in has_w else 0.0
                    dur = costs.bwd[s] * (1.0 - share) + rec
                    compute_end[s] = start + dur
                elif k == "W":
                    start = max(ready, compute_end[s])
                    dur = costs.bwd[s] * costs.weight_grad_fraction
                    compute_end[s] = start + dur
                elif k == "SO":
                    dur = swap_dur
                    start = max(ready, out_free[s], compute_end[s])
                    out_free[s] = last_so_end[s] = start + dur
                else:
                    dur = swap_dur
                    start = max(ready, in_free[s], compute_end[s], last_so_end[s])
                    in_free[s] = start + dur
                end[(s, k, x)] = start + dur
                times[a] = (start, start + dur, rec)
                ptr[s] += 1
                remaining -= 1
                progressed = True
        if not progressed:  # validate() rules this out; keep the loop honest anyway
            raise ScheduleError(f"schedule {schedule.name!r} cannot make progress")
    return times


def makespan(schedule: Schedule, costs: StageCosts, check: bool = True) -> float:
    """Just the iteration time (no Timeline statistics): for search loops."""
    return max((e for _, e, _ in op_times(schedule, costs, check).values()), default=0.0)


def simulate(schedule: Schedule, costs: StageCosts) -> Timeline:
    """Simulate `schedule` under `costs` and derive every statistic (see timeline.py)."""
    times = op_times(schedule, costs)
    ops = [OpRecord.of(a, *times[a]) for s in range(schedule.num_stages) for a in schedule.actions(s)]
    p = schedule.num_stages
    kept = tuple(costs.kept_bytes(s, schedule.stages[s].adjusted) for s in range(p))
    beta = tuple(schedule.stages[s].swap_fraction for s in range(p))
    return Timeline.from_ops(p, ops, kept, beta, name=schedule.name, origin=0.0)
