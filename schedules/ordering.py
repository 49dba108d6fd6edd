"""One global issue order for the engine.

The engine issues actions from a single Python loop; any order consistent with
every stage's list and every dependency works, and issuing by predicted start time
keeps each device's queue fed. `issue_order` is a topological sort of the
dependency graph (each stage's list order, F(s-1,x) -> F(s,x), B(s+1,x) -> B(s,x),
F -> SO -> SI -> B of a micro-batch) that always takes the ready action with the
earliest simulated start, ties broken by (stage, position in the stage's list),
so dependencies always come first even between actions that start together.
"""
from __future__ import annotations

import heapq

from schedules.costs import StageCosts
from schedules.ir import Action, Kind, Schedule
from schedules.simulator import op_times


def _cross_deps(a: Action, p: int) -> list[Action]:
    s, x = a.stage, a.microbatch
    if a.kind == Kind.F and s > 0:
        return [Action(s - 1, Kind.F, x)]
    if a.kind == Kind.B and s < p - 1:
        return [Action(s + 1, Kind.B, x)]
    return []


def issue_order(schedule: Schedule, costs: StageCosts | None = None) -> list[Action]:
    """All actions of `schedule` in one dependency-respecting order (default costs:
    StageCosts.uniform, f=1, b=2, r=1)."""
    p = schedule.num_stages
    costs = costs or StageCosts.uniform(p)
    times = op_times(schedule, costs)   # validates
    rows = [schedule.actions(s) for s in range(p)]
    pos = {a: (s, i) for s in range(p) for i, a in enumerate(rows[s])}
    waiting: dict[Action, int] = {}
    dependents: dict[Action, list[Action]] = {}
    for s in range(p):
        for i, a in enumerate(rows[s]):
            deps = ([rows[s][i - 1]] if i else []) + _cross_deps(a, p)
            waiting[a] = len(deps)
            for d in deps:
                dependents.setdefault(d, []).append(a)
    heap = [(times[a][0], *pos[a], a) for a, n in waiting.items() if n == 0]
    heapq.heapify(heap)
    out: list[Action] = []
    while heap:
        *_, a = heapq.heappop(heap)
        out.append(a)
        for d in dependents.get(a, ()):
            waiting[d] -= 1
            if waiting[d] == 0:
                heapq.heappush(heap, (times[d][0], *pos[d], d))
    return out
