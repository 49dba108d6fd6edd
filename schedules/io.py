"""Schedule files, format "obscura-schedule/1" (design.md):

    {"format": "obscura-schedule/1", "name": "obscura", "num_stages": 4,
     "num_microbatches": 8,
     "stages": [{"recompute": ["mlp_act", "mlp_mul"], "swap_fraction": 0.5,
                 "swap_blocks": 2, "actions": ["F0", "F1", "SO0", "B0", "SI0", ...]}]}

`swap_blocks` is optional (default 0). Reading validates the schedule; anything
malformed is one ScheduleError line naming the problem.
"""
from __future__ import annotations

import math
import os

from schedules.errors import ScheduleError
from schedules.ir import Action, Schedule, StageSpec
from schedules.jsonio import read_json, write_json_atomic
from schedules.validator import validate

FORMAT = "obscura-schedule/1"


def schedule_to_json(schedule: Schedule) -> dict:
    return {"format": FORMAT, "name": schedule.name, "num_stages": schedule.num_stages,
            "num_microbatches": schedule.num_microbatches,
            "stages": [{"recompute": list(spec.recompute), "swap_fraction": spec.swap_fraction,
                        "swap_blocks": spec.swap_blocks, "actions": [str(a) for a in spec.actions]}
                       for spec in schedule.stages]}


def _int(d: dict, key: str, where: str) -> int:
    v = d.get(key)
    if isinstance(v, bool) or not isinstance(v, int):
        raise ScheduleError(f"schedule JSON: {where}{key!r} must be an integer, got {v!r}")
    return v


def schedule_from_json(data) -> Schedule:
    """Parse and validate; the first line of any error says what is wrong."""
    if not isinstance(data, dict):
        raise ScheduleError("schedule JSON: top level must be an object")
    if data.get("format") != FORMAT:
        raise ScheduleError(f"schedule JSON: format must be {FORMAT!r}, got {data.get('format')!r}")
    p = _int(data, "num_stages", "")
    m = _int(data, "num_microbatches", "")
    name = data.get("name", "schedule")
    if not isinstance(name, str):
        raise ScheduleError(f"schedule JSON: 'name' must be a string, got {name!r}")
    rows = data.get("stages")
    if not isinstance(rows, list):
        raise ScheduleError("schedule JSON: 'stages' must be a list")
    if len(rows) != p:
        raise ScheduleError(f"schedule JSON: {len(rows)} stage entries for num_stages={p}")
    stages = []
    for s, row in enumerate(rows):
        where = f"stage {s}: "
        if not isinstance(row, dict):
            raise ScheduleError(f"schedule JSON: {where}entry must be an object")
        acts = row.get("actions")
        if not isinstance(acts, list) or not all(isinstance(a, str) for a in acts):
            raise ScheduleError(f"schedule JSON: {where}'actions' must be a list of strings like 'F3'")
        rec = row.get("recompute", [])
        if not isinstance(rec, list) or not all(isinstance(r, str) for r in rec):
            raise ScheduleError(f"schedule JSON: {where}'recompute' must be a list of op or preset names")
        beta = row.get("swap_fraction", 0.0)
        if isinstance(beta, bool) or not isinstance(beta, (int, float)) or not math.isfinite(beta):
            raise ScheduleError(f"schedule JSON: {where}'swap_fraction' must be a number, got {beta!r}")
        lam = row.get("swap_blocks", 0)
        if isinstance(lam, bool) or not isinstance(lam, int):
            raise ScheduleError(f"schedule JSON: {where}'swap_blocks' must be an integer, got {lam!r}")
        stages.append(StageSpec(tuple(Action.parse(a, s) for a in acts), tuple(rec), float(beta), lam))
    schedule = Schedule(name, p, m, tuple(stages))
    validate(schedule)
    return schedule


def save_schedule(schedule: Schedule, path: str | os.PathLike) -> None:
    write_json_atomic(path, schedule_to_json(schedule))


def load_schedule(path: str | os.PathLike) -> Schedule:
    return schedule_from_json(read_json(path, "schedule JSON"))
