"""The one dependency rule: which actions an action waits on (data dependencies),
the "waits on" column of the per-kind table (schedules/actions.py).

    F(s, x)        F(s-1, x)                                  the activation arrives
    B/I(s, x)      F(s, x); B/I(s+1, x) unless s is last;     the gradient arrives
                   SI(s, x) when the block was swapped out
    W(s, x)        I(s, x)  (B(s, x) in the older B+W spelling)
    SO(s, x)       F(s, x)
    SI(s, x)       SO(s, x)

B/I(s+1, x) is whichever backward-input step stage s+1 runs for x (I when it splits
its backward, else B). Besides these, every device runs its row in order: that is
the stream order each consumer keeps itself (the validator's and the list
scheduler's row pointers, the issue order's row edges, the engine's lanes), not a
data dependency.

Actions are their own keys (schedules.ir.Action is a tuple (stage, kind,
micro-batch)). Used by the validator (deadlock check), the list scheduler
(through schedules.actions.priced), the issue order, the timeline's comm_wait,
the engine's message routes and obscura_jax.observe.events.
"""
from __future__ import annotations

from typing import Container

from schedules.actions import KINDS
from schedules.ir import Action, Kind, Schedule

def dependencies(act: Action, present: Container[Action], num_stages: int) -> tuple[Action, ...]:
    """The actions `act` waits on, among a schedule whose actions are `present` (a
    set, or any container) and which has `num_stages` stages."""
    s, k, x = act
    return KINDS[Kind(k)].waits(s, x, present.__contains__, num_stages)


def dependency_table(present, num_stages: int) -> dict[Action, tuple[Action, ...]]:
    """dependencies of every action in `present` (a set), in one pass."""
    has = present.__contains__
    return {a: KINDS[a[1]].waits(a[0], a[2], has, num_stages) for a in present}


def dependency_map(schedule: Schedule) -> dict[Action, tuple[Action, ...]]:
    """Every action of `schedule` -> what it waits on (computed once per schedule)."""
    return dependency_table({a for row in schedule.rows for a in row}, schedule.num_stages)
