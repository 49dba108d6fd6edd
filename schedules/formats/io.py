"""Schedule files. Written: "obscura-schedule/2"; read: /2 and /1.

obscura-schedule/2 (docs/formats.md, "Schedules"):

    {"format": "obscura-schedule/2", "name": "interleaved", "num_stages": 8,
     "num_devices": 4, "num_microbatches": 8,
     "stage_to_device": [0, 1, 2, 3, 0, 1, 2, 3],
     "stages": [{"recompute": ["full"], "swap_fraction": 0.0, "swap_blocks": 0}, ...],
     "devices": [["0F0", "0F1", "0F2", "0F3", "4F0", ...], ...]}

`stages` holds each model stage's settings, `devices` each device's row in torch's
`_Action` strings (stage first); `overlapped` (only when there are any: a torch
CSV's `(a;b)OVERLAP_F_B` cells, Schedule.overlapped) lists the pairs, e.g.
[["0F7", "7B3"], ...]. obscura-schedule/1 (one stage per device, stage s
on device s): each `stages` entry also holds the stage's "actions" in the short
form ("F0", "SO0", ...); `swap_blocks` is optional (default 0).
Reading validates the schedule; anything malformed is one ScheduleError line
naming the problem. The file's counts, device indices and every action's stage and
micro-batch index are held to the pipeline bounds (schedules.bounds) before anything
is built from them.
"""
from __future__ import annotations

import math
import os

from schedules.bounds import check_action_count, check_index, check_pipeline_size
from schedules.errors import ScheduleError
from schedules.ir import Action, Schedule, StageSpec
from schedules.formats.jsonio import read_json, write_json_atomic
from schedules.validator import validate

FORMAT = "obscura-schedule/2"
FORMAT_V1 = "obscura-schedule/1"


def schedule_to_json(schedule: Schedule) -> dict:
    out = {"format": FORMAT, "name": schedule.name, "num_stages": schedule.num_stages,
           "num_devices": schedule.num_devices, "num_microbatches": schedule.num_microbatches,
           "stage_to_device": list(schedule.stage_to_device),
           "stages": [{"recompute": list(spec.recompute), "swap_fraction": spec.swap_fraction,
                       "swap_blocks": spec.swap_blocks} for spec in schedule.stages],
           "devices": [[a.long for a in row] for row in schedule.rows]}
    if schedule.overlapped:
        out["overlapped"] = [[a.long, b.long] for a, b in schedule.overlapped]
    return out


def _pairs(data) -> tuple[tuple[Action, Action], ...]:
    pairs = data.get("overlapped", [])
    if not isinstance(pairs, list) or not all(isinstance(x, list) and len(x) == 2 and all(
            isinstance(a, str) for a in x) for x in pairs):
        raise ScheduleError("schedule JSON: 'overlapped' must be a list of pairs of actions like [\"0F7\", \"7B3\"]")
    return tuple((Action.parse(a), Action.parse(b)) for a, b in pairs)


def _int(d: dict, key: str, where: str) -> int:
    v = d.get(key)
    if isinstance(v, bool) or not isinstance(v, int):
        raise ScheduleError(f"schedule JSON: {where}{key!r} must be an integer, got {v!r}")
    return v


def _settings(row, where: str) -> tuple[tuple[str, ...], float, int]:
    if not isinstance(row, dict):
        raise ScheduleError(f"schedule JSON: {where}entry must be an object")
    rec = row.get("recompute", [])
    if not isinstance(rec, list) or not all(isinstance(r, str) for r in rec):
        raise ScheduleError(f"schedule JSON: {where}'recompute' must be a list of op or preset names")
    beta = row.get("swap_fraction", 0.0)
    if isinstance(beta, bool) or not isinstance(beta, (int, float)) or not math.isfinite(beta):
        raise ScheduleError(f"schedule JSON: {where}'swap_fraction' must be a number, got {beta!r}")
    lam = row.get("swap_blocks", 0)
    if isinstance(lam, bool) or not isinstance(lam, int):
        raise ScheduleError(f"schedule JSON: {where}'swap_blocks' must be an integer, got {lam!r}")
    return tuple(rec), float(beta), lam


def _actions(acts, where: str, stage: int | None) -> tuple[Action, ...]:
    if not isinstance(acts, list) or not all(isinstance(a, str) for a in acts):
        example = "'F3'" if stage is not None else "'2F3'"
        raise ScheduleError(f"schedule JSON: {where}'actions' must be a list of strings like {example}")
    for a in acts:
        if len(a) > 32:
            raise ScheduleError(f"schedule JSON: {where}action string of {len(a)} characters ({a[:20]}...); "
                                "expected one like '2F3'")
    out = tuple(Action.parse(a, stage) for a in acts)
    for a in out:
        check_index("stage", a.stage, f"schedule JSON: {where}action {a.long}: ")
        check_index("micro-batch", a.microbatch, f"schedule JSON: {where}action {a.long}: ")
    return out


def _count_actions(data: dict, rows: list) -> None:
    """The file's actions within MAX_ACTIONS, counted before any is parsed."""
    devices = data.get("devices")
    lists = [r.get("actions") for r in rows if isinstance(r, dict)] + (devices if isinstance(devices, list) else [])
    check_action_count(sum(len(x) for x in lists if isinstance(x, list)), "schedule JSON: ")


def schedule_from_json(data) -> Schedule:
    """Parse and validate; the first line of any error says what is wrong."""
    if not isinstance(data, dict):
        raise ScheduleError("schedule JSON: top level must be an object")
    fmt = data.get("format")
    if fmt not in (FORMAT, FORMAT_V1):
        raise ScheduleError(f"schedule JSON: format must be {FORMAT!r} (or {FORMAT_V1!r}), got {fmt!r}")
    p = _int(data, "num_stages", "")
    m = _int(data, "num_microbatches", "")
    try:
        check_pipeline_size(p, m)
    except ScheduleError as e:
        raise ScheduleError(f"schedule JSON: {e}") from None
    name = data.get("name", "schedule")
    if not isinstance(name, str):
        raise ScheduleError(f"schedule JSON: 'name' must be a string, got {name!r}")
    rows = data.get("stages")
    if not isinstance(rows, list):
        raise ScheduleError("schedule JSON: 'stages' must be a list")
    if len(rows) != p:
        raise ScheduleError(f"schedule JSON: {len(rows)} stage entries for num_stages={p}")
    _count_actions(data, rows)
    if fmt == FORMAT_V1:
        stages = []
        for s, row in enumerate(rows):
            rec, beta, lam = _settings(row, f"stage {s}: ")
            stages.append(StageSpec(_actions(row.get("actions"), f"stage {s}: ", s), rec, beta, lam))
        schedule = Schedule(name, p, m, tuple(stages))
    else:
        where = data.get("stage_to_device")
        if not isinstance(where, list) or len(where) != p or not all(
                isinstance(d, int) and not isinstance(d, bool) for d in where):
            raise ScheduleError(f"schedule JSON: 'stage_to_device' must be a list of {p} device indices")
        for d in where:
            check_index("device", d, "schedule JSON: 'stage_to_device': ")
        devices = data.get("devices")
        if not isinstance(devices, list):
            raise ScheduleError("schedule JSON: 'devices' must be a list (one row of actions per device)")
        n = data.get("num_devices", len(devices))
        if n != len(devices):
            raise ScheduleError(f"schedule JSON: {len(devices)} device rows for num_devices={n!r}")
        device_rows = tuple(_actions(r, f"device {d}: ", None) for d, r in enumerate(devices))
        specs = tuple(StageSpec((), *_settings(row, f"stage {s}: ")) for s, row in enumerate(rows))
        schedule = Schedule(name, p, m, specs, tuple(where), device_rows, _pairs(data))
    validate(schedule)
    return schedule


def save_schedule(schedule: Schedule, path: str | os.PathLike) -> None:
    write_json_atomic(path, schedule_to_json(schedule))


def load_schedule(path: str | os.PathLike) -> Schedule:
    return schedule_from_json(read_json(path, "schedule JSON"))
