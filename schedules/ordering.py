"""One global issue order for the engine.

The engine issues actions from a single Python loop; any order consistent with
every device's row and every dependency works, and issuing by predicted start time
keeps each device's queue fed. `issue_order` is the one order walker
(schedules.scheduling.order_walk) over the devices' rows: a topological sort of the
dependency graph (each device's row order plus schedules.deps) that always takes
the ready action with the earliest simulated start, ties broken by (device,
position in the device's row), so dependencies always come first even between
actions that start together.
"""
from __future__ import annotations

from schedules.costs import StageCosts
from schedules.deps import dependency_map
from schedules.ir import Action, Schedule
from schedules.scheduling.order_walk import merge_in_start_order
from schedules.simulator import op_times


def issue_order(schedule: Schedule, costs: StageCosts | None = None) -> list[Action]:
    """All actions of `schedule` in one dependency-respecting order (default costs:
    StageCosts.uniform, f=1, b=2, r=1)."""
    costs = costs or StageCosts.uniform(schedule.num_stages)
    times = op_times(schedule, costs)   # validates
    return merge_in_start_order(schedule.rows, dependency_map(schedule), {a: t[0] for a, t in times.items()})
