"""The one schedule validator, shared by generators, the simulator, the engine and
file loading.

Rules, checked per stage and then globally:
  1. every F and every B appears exactly once per micro-batch 0..m-1; W, SO and SI
     at most once each; no micro-batch outside 0..m-1;
  2. forwards run in micro-batch order, so do backwards and weight-grads (the
     queues between neighbouring stages are first-in first-out);
  3. F(x) before B(x), W(x) after B(x); SO(x) after F(x) and before B(x); SI(x)
     after SO(x) and before B(x); an SO has its SI and an SI its SO;
  4. deadlock-freedom: running all stages together, every action is eventually
     issued (F(s,x) needs F(s-1,x), B(s,x) needs B(s+1,x)).

A failure raises ScheduleError: the first line says what is wrong and where, the
following lines show the stage x step grid with the offending action(s) marked.
"""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from schedules.errors import ScheduleError
from schedules.ir import Action, Kind, Schedule
from schedules.text import format_grid


@dataclass(frozen=True)
class Problem:
    stage: int
    index: int | None      # position in the stage's list; None for a missing action
    message: str


def problems(schedule: Schedule) -> list[Problem]:
    """All structural problems (rules 1-3), or the deadlock (rule 4) if there are none."""
    found: list[Problem] = []
    for s in range(schedule.num_stages):
        found.extend(_stage_problems(schedule, s))
    if not found:
        found.extend(_deadlock(schedule))
    return found


# Schedules are frozen and hashable, and planners validate the same candidate many
# times (generate, then simulate): remember the last few that passed.
_KNOWN_VALID: "OrderedDict[Schedule, None]" = OrderedDict()
_KNOWN_VALID_SIZE = 512


def validate(schedule: Schedule) -> None:
    if schedule in _KNOWN_VALID:
        _KNOWN_VALID.move_to_end(schedule)
        return
    found = problems(schedule)
    if not found:
        _KNOWN_VALID[schedule] = None
        if len(_KNOWN_VALID) > _KNOWN_VALID_SIZE:
            _KNOWN_VALID.popitem(last=False)
        return
    first = found[0]
    more = f" (and {len(found) - 1} more problem{'s' if len(found) > 2 else ''})" if len(found) > 1 else ""
    marks = [(p.stage, p.index) for p in found if p.index is not None]
    notes: dict[int, str] = {}
    for p in found:
        if p.index is None:
            notes[p.stage] = (notes[p.stage] + "; " if p.stage in notes else "") + p.message
    grid = format_grid(schedule.grid(), marks=marks, notes=notes)
    raise ScheduleError(f"invalid schedule {schedule.name!r}: {first.message}{more}\n{grid}")


def _stage_problems(schedule: Schedule, s: int) -> list[Problem]:
    m = schedule.num_microbatches
    out: list[Problem] = []
    pos: dict[tuple[Kind, int], int] = {}
    last: dict[Kind, int] = {}
    for i, a in enumerate(schedule.actions(s)):
        where = f"stage {s} step {i}"
        if a.microbatch >= m:
            out.append(Problem(s, i, f"{a} at {where}: micro-batch {a.microbatch} is outside 0..{m - 1}"))
            continue
        key = (a.kind, a.microbatch)
        if key in pos:
            out.append(Problem(s, i, f"{a} at {where} is a duplicate (first at step {pos[key]})"))
            continue
        pos[key] = i
        if a.kind in (Kind.F, Kind.B, Kind.W):
            if a.kind in last and a.microbatch < last[a.kind]:
                out.append(Problem(s, i, f"{a} at {where} comes after {a.kind}{last[a.kind]}: "
                                         f"{a.kind.name} actions must run in micro-batch order"))
            last[a.kind] = max(a.microbatch, last.get(a.kind, -1))
    for x in range(m):
        for k in (Kind.F, Kind.B):
            if (k, x) not in pos:
                out.append(Problem(s, None, f"stage {s} has no {k}{x}"))
    for (k, x), i in sorted(pos.items(), key=lambda kv: kv[1]):
        f, b = pos.get((Kind.F, x)), pos.get((Kind.B, x))
        so, si = pos.get((Kind.SO, x)), pos.get((Kind.SI, x))
        where = f"stage {s} step {i}"
        if k == Kind.B and f is not None and f > i:
            out.append(Problem(s, i, f"B{x} at {where} comes before its F{x}"))
        elif k == Kind.W and (b is None or b > i):
            out.append(Problem(s, i, f"W{x} at {where} does not follow B{x}"))
        elif k == Kind.SO:
            if f is None or f > i:
                out.append(Problem(s, i, f"SO{x} at {where} comes before its F{x}"))
            elif b is not None and b < i:
                out.append(Problem(s, i, f"SO{x} at {where} comes after B{x} freed the activations"))
            elif si is None:
                out.append(Problem(s, i, f"SO{x} at {where} is never swapped back in (no SI{x})"))
        elif k == Kind.SI:
            if so is None or so > i:
                out.append(Problem(s, i, f"SI{x} at {where} has no earlier SO{x}"))
            elif b is not None and b < i:
                out.append(Problem(s, i, f"SI{x} at {where} comes after B{x} needed it"))
    return out


def _deadlock(schedule: Schedule) -> list[Problem]:
    """Run every stage's list as far as cross-stage dependencies allow."""
    p = schedule.num_stages
    done: set[Action] = set()
    ptr = [0] * p
    rows = [schedule.actions(s) for s in range(p)]
    progress = True
    while progress:
        progress = False
        for s in range(p):
            while ptr[s] < len(rows[s]) and _ready(rows[s][ptr[s]], done, p):
                done.add(rows[s][ptr[s]])
                ptr[s] += 1
                progress = True
    stuck = [s for s in range(p) if ptr[s] < len(rows[s])]
    out = []
    for s in stuck:
        a = rows[s][ptr[s]]
        dep = _cross_dep(a, p)
        out.append(Problem(s, ptr[s], f"deadlock: stage {s} step {ptr[s]} waits at {a} for {dep} "
                                      f"on stage {dep.stage}, which never runs"))
    return out


def _cross_dep(a: Action, p: int) -> Action | None:
    if a.kind == Kind.F and a.stage > 0:
        return Action(a.stage - 1, Kind.F, a.microbatch)
    if a.kind == Kind.B and a.stage < p - 1:
        return Action(a.stage + 1, Kind.B, a.microbatch)
    return None


def _ready(a: Action, done: set[Action], p: int) -> bool:
    dep = _cross_dep(a, p)
    return dep is None or dep in done
