"""The one schedule validator, shared by generators, the simulator, the engine and
file loading.

Rules, checked per stage (on the stage's own order) and then globally:
  1. every F appears exactly once per micro-batch 0..m-1, and so does one backward:
     a full B, or a split one, I and W; W, SO and SI at most once each; no
     micro-batch outside 0..m-1. (A B followed by a W of the same micro-batch is the
     older spelling of I + W, see ir.py.)
  2. (no rule on the order of micro-batches: the dependency rule does not need one,
     since every message is named by its producer and consumer action, not by its
     place in a queue; e.g. torch's LoopedBFS runs backwards in reverse micro-batch
     order. Rule 4 still refuses an order whose waits cannot all be met.)
  3. F(x) before B/I(x), W(x) after I(x); SO(x) after F(x) and before B/I(x); SI(x)
     after SO(x) and before B/I(x); an SO has its SI and an SI its SO;
  4. deadlock-freedom: running every device's row in order, each action waiting on
     its dependencies (schedules.deps), every action is eventually issued (an
     overlapped pair issues as one unit, once both may start).

A failure raises ScheduleError: the first line says what is wrong and where, the
following lines show the device x step grid with the offending action(s) marked.
With one stage per device, rows are stages and actions print short ("B3 at stage 1
step 4"); otherwise rows are devices and actions print stage first ("2B3 at device 1
step 4").
"""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from schedules.deps import dependency_table
from schedules.errors import ScheduleError
from schedules.ir import BACKWARD_INPUT_KINDS, Action, Kind, Schedule
from schedules.text import format_grid


@dataclass(frozen=True)
class Problem:
    row: int               # device row (== stage with one stage per device)
    index: int | None      # position in the device's row; None for a missing action
    message: str


def problems(schedule: Schedule) -> list[Problem]:
    """All structural problems (rules 1-3), or the deadlock (rule 4) if there are none."""
    found: list[Problem] = []
    for s in range(schedule.num_stages):
        found.extend(_stage_problems(schedule, s))
    if not found:
        found.extend(_deadlock(schedule))
    return found


# Planners validate the same rows many times (generate, then simulate; one order under
# several swap fractions or recompute names): remember the last few that passed, by
# what the rules read: micro-batches, stage -> device map and device rows (names,
# recompute sets and swap settings only label messages).
_KNOWN_VALID: "OrderedDict[tuple, None]" = OrderedDict()
_KNOWN_VALID_SIZE = 512


def validate(schedule: Schedule) -> None:
    key = (schedule.num_microbatches, schedule.stage_to_device, schedule.rows, schedule.overlapped)
    if key in _KNOWN_VALID:
        _KNOWN_VALID.move_to_end(key)
        return
    found = problems(schedule)
    if not found:
        _KNOWN_VALID[key] = None
        if len(_KNOWN_VALID) > _KNOWN_VALID_SIZE:
            _KNOWN_VALID.popitem(last=False)
        return
    first = found[0]
    more = f" (and {len(found) - 1} more problem{'s' if len(found) > 2 else ''})" if len(found) > 1 else ""
    marks = [(p.row, p.index) for p in found if p.index is not None]
    notes: dict[int, str] = {}
    for p in found:
        if p.index is None:
            notes[p.row] = (notes[p.row] + "; " if p.row in notes else "") + p.message
    grid = format_grid(schedule.grid(), marks=marks, notes=notes, labels=schedule.row_labels())
    raise ScheduleError(f"invalid schedule {schedule.name!r}: {first.message}{more}\n{grid}")


def _stage_problems(schedule: Schedule, s: int) -> list[Problem]:
    """Rules 1-3 on stage s's own order; positions are indices in its device's row.
    Long: the rules read best side by side, one message each."""
    m = schedule.num_microbatches
    d = schedule.stage_to_device[s]
    name = schedule.label
    unit = schedule.row_labels()[d]
    mine = [(i, a) for i, a in enumerate(schedule.rows[d]) if a.stage == s]
    out: list[Problem] = []
    pos: dict[tuple[Kind, int], int] = {}
    def at(i: int) -> str:   # messages are built only for problems: a valid row costs no formatting
        return f"{unit} step {i}"

    for i, a in mine:
        if a.microbatch >= m:
            out.append(Problem(d, i, f"{name(a)} at {at(i)}: micro-batch {a.microbatch} is outside 0..{m - 1}"))
            continue
        key = (a.kind, a.microbatch)
        if key in pos:
            out.append(Problem(d, i, f"{name(a)} at {at(i)} is a duplicate (first at step {pos[key]})"))
            continue
        pos[key] = i
    splits = any(k == Kind.I for k, _ in pos)
    for x in range(m):
        if (Kind.F, x) not in pos:
            out.append(Problem(d, None, f"stage {s} has no F{x}"))
        if (Kind.B, x) not in pos and (Kind.I, x) not in pos:
            out.append(Problem(d, None, f"stage {s} has no {'I' if splits else 'B'}{x}"))
    for (k, x), i in sorted(pos.items(), key=lambda kv: kv[1]):
        f, w = pos.get((Kind.F, x)), pos.get((Kind.W, x))
        b = pos.get((Kind.I, x), pos.get((Kind.B, x)))
        so, si = pos.get((Kind.SO, x)), pos.get((Kind.SI, x))
        problem = None
        if k in BACKWARD_INPUT_KINDS and f is not None and f > i:
            problem = f"comes before its F{x}"
        elif k == Kind.B and (Kind.I, x) in pos:
            problem = f": micro-batch {x} also has I{x} (a backward is either full, B, or split, I + W)"
        elif k == Kind.I and w is None:
            problem = f"has no W{x} (a split backward needs its weight-grad half)"
        elif k == Kind.W and (b is None or b > i):
            problem = "does not follow {b}"
        elif k == Kind.SO:
            if f is None or f > i:
                problem = f"comes before its F{x}"
            elif b is not None and b < i:
                problem = "comes after {b} freed the activations"
            elif si is None:
                problem = f"is never swapped back in (no SI{x})"
        elif k == Kind.SI:
            if so is None or so > i:
                problem = f"has no earlier SO{x}"
            elif b is not None and b < i:
                problem = "comes after {b} needed it"
        if problem is not None:
            bname = f"{'I' if (Kind.I, x) in pos else 'B'}{x}"
            text = problem.replace("{b}", bname)
            out.append(Problem(d, i, f"{name(Action(s, k, x))} at {at(i)}{'' if text[0] == ':' else ' '}{text}"))
    return out


def _deadlock(schedule: Schedule) -> list[Problem]:
    """Run every device's row as far as the dependencies (schedules.deps) allow."""
    rows = schedule.rows
    deps = dependency_table({a for row in rows for a in row}, schedule.num_stages)
    for a, b in schedule.overlapped:    # the unit waits for both; its halves do not wait on each other
        deps[a] = tuple(x for x in deps[a] + deps[b] if x not in (a, b))
    partner = {a: 1 for a, _ in schedule.overlapped}
    done: set[Action] = set()
    ptr = [0] * len(rows)
    progress = True
    while progress:
        progress = False
        for d, row in enumerate(rows):
            while ptr[d] < len(row) and all(x in done for x in deps[row[ptr[d]]]):
                width = 1 + partner.get(row[ptr[d]], 0)
                done.update(row[ptr[d]:ptr[d] + width])
                ptr[d] += width
                progress = True
    name = schedule.label
    labels = schedule.row_labels()
    out = []
    for d, row in enumerate(rows):
        if ptr[d] == len(row):
            continue
        a = row[ptr[d]]
        dep = next(x for x in deps[a] if x not in done)
        s = dep.stage
        out.append(Problem(d, ptr[d], f"deadlock: {labels[d]} step {ptr[d]} waits at {name(a)} for {name(dep)} "
                                      f"on {labels[schedule.stage_to_device[s]]}, which never runs"))
    return out
