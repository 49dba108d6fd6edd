"""One global issue order for the engine.

The engine issues actions from a single Python loop; any order consistent with
every device's row and every dependency works, and issuing by predicted start time
keeps each device's queue fed. `issue_order` is a topological sort of the
dependency graph (each device's row order plus schedules.deps) that always takes
the ready action with the earliest simulated start, ties broken by (device,
position in the device's row), so dependencies always come first even between
actions that start together.
"""
from __future__ import annotations

import heapq

from schedules.costs import StageCosts
from schedules.deps import dependency_map
from schedules.ir import Action, Schedule
from schedules.simulator import op_times


def issue_order(schedule: Schedule, costs: StageCosts | None = None) -> list[Action]:
    """All actions of `schedule` in one dependency-respecting order (default costs:
    StageCosts.uniform, f=1, b=2, r=1)."""
    costs = costs or StageCosts.uniform(schedule.num_stages)
    times = op_times(schedule, costs)   # validates
    rows = schedule.rows
    data = dependency_map(schedule)
    pos = {a: (d, i) for d, row in enumerate(rows) for i, a in enumerate(row)}
    waiting: dict[Action, int] = {}
    dependents: dict[Action, list[Action]] = {}
    for d, row in enumerate(rows):
        for i, a in enumerate(row):
            # same-device dependencies come earlier in the row (the validator checks it)
            deps = ([row[i - 1]] if i else []) + [x for x in data[a] if pos[x][0] != d]
            waiting[a] = len(deps)
            for x in deps:
                dependents.setdefault(x, []).append(a)
    heap = [(times[a][0], *pos[a], a) for a, n in waiting.items() if n == 0]
    heapq.heapify(heap)
    out: list[Action] = []
    while heap:
        *_, a = heapq.heappop(heap)
        out.append(a)
        for x in dependents.get(a, ()):
            waiting[x] -= 1
            if waiting[x] == 0:
                heapq.heappush(heap, (times[x][0], *pos[x], x))
    return out
