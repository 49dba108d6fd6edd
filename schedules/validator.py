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
     overlapped pair issues as one unit, once both may start): the list scheduler's
     own run, which reports the actions it could not place.

A failure raises ScheduleError: the first line says what is wrong and where, the
following lines show the device x step grid with the offending action(s) marked.
With one stage per device, rows are stages and actions print short ("B3 at stage 1
step 4"); otherwise rows are devices and actions print stage first ("2B3 at device 1
step 4").
"""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from schedules.actions import Priced, structure
from schedules.errors import ScheduleError
from schedules.ir import BACKWARD_INPUT_KINDS, Action, Kind, Schedule
from schedules.scheduling.list_schedule import list_schedule
from schedules.formats.text import format_grid


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
    """Rule 4: the list scheduler (schedules.scheduling.list_schedule) runs every device's row
    in order, times aside (every duration 0); a run it cannot complete names the
    action each device stopped at (Run.waiting), here marked with the first input
    it waits for that never ran."""
    st = structure(schedule.rows, schedule.num_stages, schedule.stage_to_device, schedule.overlapped)
    zeros = [0.0] * len(st.actions)
    done = list_schedule(Priced(st.actions, st.kind, st.rows, st.device_of, st.lane, st.deps, st.woken, st.pair,
                                zeros, zeros, [0.0] * (schedule.num_stages + 1)))
    if done.complete:
        return []
    name, labels = schedule.label, schedule.row_labels()
    out = []
    for i in done.waiting:
        d, a = st.device_of[i], st.actions[i]
        unit = (i, st.pair[i]) if i in st.pair else (i,)   # an overlapped pair waits for both halves' inputs
        dep = st.actions[next(j for k in unit for j, _ in st.deps[k] if j not in unit and done.end[j] is None)]
        step = len(done.order[d])     # an in-order device placed its row up to here
        out.append(Problem(d, step, f"deadlock: {labels[d]} step {step} waits at {name(a)} for {name(dep)} "
                                    f"on {labels[schedule.stage_to_device[dep.stage]]}, which never runs"))
    return out
