"""The first stage's backward joined: where model stage 0's W follows its own I at
once on its device, the two run as one B, the whole backward.

Nothing waits for stage 0's input gradient (there is no stage upstream), so
splitting its backward buys no time where its W runs right after its I; split,
the I still makes W's block (the output cotangents W reads) while the residuals
are live, and what XLA cannot write into the residual leaves I takes donated is
held beside them (`weight_grad_beside_bytes`, docs/design.md "Memory on a device").
Joined, stage 0's backward holds what 1F1B's does. ZB-H1 (stage 0's W never
delayed), ZB-H2, ZB-V and the V schedules have such pairs; a W a generator moved
later, to fill a bubble, keeps its split.

    stage 0 |FFFF...IWFIWFIWFIWFIWIWIWIW|   ->   |FFFF...B.FB.FB.FB.FB.B.B.B.|
    stage 1 |.FFF..IFIWFIWFIWFIWFIWIWIWW|        (unchanged)

The planner evaluates every family's order joined (planner.family_search.order_of),
so `obscura plan` and its plan files, which record their orders, run it; a schedule
named on the command line (`--schedule zb-h1`) runs the generator's order as written.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Sequence

from schedules.ir import BACKWARD_INPUT_KINDS, Action, Kind, Schedule
from schedules.validator import validate

FIRST_WEIGHT_GRAD = ("split", "at-once")   # --first-weight-grad: the generator's order, or stage 0 joined


def joined_row(row: Sequence[Action], keep: frozenset = frozenset()) -> tuple[Action, ...]:
    """`row` with every stage-0 I(x) (or B(x) with a W) followed at once by its W(x)
    written as one B(x); actions in `keep` (overlapped pairs) stay as they are."""
    out: list[Action] = []
    i = 0
    while i < len(row):
        a, nxt = row[i], row[i + 1] if i + 1 < len(row) else None
        if (nxt is not None and a.stage == 0 and nxt.stage == 0 and a.kind in BACKWARD_INPUT_KINDS
                and nxt.kind == Kind.W and nxt.microbatch == a.microbatch and a not in keep and nxt not in keep):
            out.append(Action(0, Kind.B, a.microbatch))
            i += 2
        else:
            out.append(a)
            i += 1
    return tuple(out)


def join_first_stage_backward(schedule: Schedule) -> Schedule:
    """The schedule with stage 0's adjacent I, W pairs joined (module docstring);
    the same object where there is nothing to join."""
    keep = frozenset(a for pair in schedule.overlapped for a in pair)
    device = schedule.stage_to_device[0]
    row = schedule.rows[device]
    new = joined_row(row, keep)
    if new == tuple(row):
        return schedule
    if schedule.device_rows:
        rows = tuple(new if d == device else r for d, r in enumerate(schedule.device_rows))
        stages = tuple(replace(spec, actions=()) for spec in schedule.stages)
        joined = replace(schedule, stages=stages, device_rows=rows)
    else:
        joined = replace(schedule, stages=(replace(schedule.stages[0], actions=new), *schedule.stages[1:]))
    validate(joined)
    return joined


def first_weight_grad(schedule: Schedule, mode: str) -> Schedule:
    """`--first-weight-grad MODE` applied: the schedule as written ("split") or joined ("at-once")."""
    if mode not in FIRST_WEIGHT_GRAD:
        raise ValueError(f"first weight grad must be one of {', '.join(FIRST_WEIGHT_GRAD)}, got {mode!r}")
    return join_first_stage_backward(schedule) if mode == "at-once" else schedule
