"""Chrome trace-event JSON of any Timeline (simulated or measured): open it in
ui.perfetto.dev or chrome://tracing.

Format (the Trace Event Format's JSON object form): {"traceEvents": [...],
"displayTimeUnit": "ms", "otherData": {...}}. Every op is one complete event
("ph": "X") with "ts" and "dur" in microseconds; a device is a process ("pid" =
device index, named "device d (stage ...)") with one track ("tid") per stage and
lane: the k-th stage on the device has tid 4k + lane, lane 0 its compute (F, B, I,
W), 1 its swap out (SO), 2 its swap in (SI), 3 the transfers arriving for it from
other stages (when given). A backward that recomputes holds a nested "recompute"
slice over its leading recompute part. Process and track names and sort orders are
metadata events ("ph": "M"). Each op event's "name" is the action as the timeline
prints it ("F3", or "2F3" with several stages on a device); "cat" is its kind;
"args" hold stage, micro-batch and the recompute part.

`iteration` (a measured step) adds one more process, "iteration", after the
devices: a "step N" slice over the whole step and, nested in it, the "optimizer
step" slice; the trace then spans exactly the step (`otherData.makespan_s`).

`seconds_per_unit` converts timeline time to seconds (1: the timeline is in
seconds, as measured ones are; simulated unit-cost timelines then show one unit
as one second).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Sequence

from schedules.actions import COMPUTE, HOST_IN, HOST_OUT, KINDS
from schedules.errors import ScheduleError
from schedules.formats.jsonio import write_json_atomic
from schedules.timeline import Timeline

COMPUTE_LANE = (0, "compute")
TRACKS = {COMPUTE: COMPUTE_LANE, HOST_OUT: (1, "swap out (SO)"), HOST_IN: (2, "swap in (SI)")}  # per table lane
TRANSFER_LANE = (3, "transfers in")
TRACKS_PER_STAGE = 4


@dataclass(frozen=True)
class Transfer:
    """A message between stages as a trace shows it: on its consumer's track."""
    label: str           # e.g. "2F3->3F3"
    src: int
    dst: int
    start: float         # timeline units
    end: float


@dataclass(frozen=True)
class Iteration:
    """The measured step a timeline shows: its number, its wall time and when its
    optimizer step began (timeline units, from the step's start)."""
    step: int
    seconds: float
    optimizer_start: float


def track(timeline: Timeline, stage: int, lane: int) -> tuple[int, int]:
    """(pid, tid) of a stage's lane."""
    d = timeline.device_of(stage)
    k = sorted({s for s in range(timeline.num_stages) if timeline.device_of(s) == d}).index(stage)
    return d, TRACKS_PER_STAGE * k + lane


def _track(kind) -> tuple[int, str]:
    """(lane index, name) of a kind's track: its lane in the per-kind table."""
    return TRACKS[KINDS[kind].lane]


def trace_events(timeline: Timeline, seconds_per_unit: float = 1.0, *, transfers: Sequence[Transfer] = (),
                 iteration: Iteration | None = None) -> dict:
    """The trace-event JSON object of `timeline` (and its transfers and step)."""
    us = 1e6 * seconds_per_unit
    events = []
    for d in range(timeline.num_devices):
        mine = [s for s in range(timeline.num_stages) if timeline.device_of(s) == d]
        name = f"device {d}" + (f" (stages {', '.join(map(str, mine))})" if len(mine) > 1 else f" (stage {mine[0]})"
                                if mine else "")
        events += _meta(d, 0, "process_name", name) + _meta(d, 0, "process_sort_index", d, "sort_index")
        for s in mine:
            ops = timeline.stage_ops(s)
            lanes = {COMPUTE_LANE} | {_track(o.kind) for o in ops}
            if any(t.dst == s for t in transfers):
                lanes.add(TRANSFER_LANE)
            for lane, what in sorted(lanes):
                _, tid = track(timeline, s, lane)
                label = f"stage {s}" if lane == 0 else f"stage {s} {what}"
                events += _meta(d, tid, "thread_name", label) + _meta(d, tid, "thread_sort_index", tid, "sort_index")
    for o in timeline.ops:
        pid, tid = track(timeline, o.stage, _track(o.kind)[0])
        args = {"stage": o.stage, "microbatch": o.microbatch}
        if o.recompute:
            args["recompute_us"] = o.recompute * us
        events.append({"name": timeline.label(o), "cat": o.kind.value, "ph": "X", "ts": o.start * us,
                       "dur": o.duration * us, "pid": pid, "tid": tid, "args": args})
        if o.recompute:    # nested: the leading part of the backward spent recomputing
            events.append({"name": "recompute", "cat": "recompute", "ph": "X", "ts": o.start * us,
                           "dur": o.recompute * us, "pid": pid, "tid": tid,
                           "args": {"stage": o.stage, "microbatch": o.microbatch}})
    for t in transfers:
        pid, tid = track(timeline, t.dst, TRANSFER_LANE[0])
        events.append({"name": t.label, "cat": "transfer", "ph": "X", "ts": t.start * us,
                       "dur": (t.end - t.start) * us, "pid": pid, "tid": tid, "args": {"from_stage": t.src,
                                                                                       "to_stage": t.dst}})
    span = timeline.makespan
    other = {"name": timeline.name, "num_stages": timeline.num_stages, "num_devices": timeline.num_devices,
             "actions_makespan_s": timeline.makespan * seconds_per_unit,
             "bubble_fraction": timeline.bubble_fraction, "recompute_fraction": timeline.recompute_fraction}
    if iteration is not None:
        pid = timeline.num_devices
        events += _meta(pid, 0, "process_name", "iteration") + _meta(pid, 0, "process_sort_index", pid,
                                                                       "sort_index")
        events += _meta(pid, 0, "thread_name", "step")
        span = max(span, iteration.seconds / seconds_per_unit)
        events.append({"name": f"step {iteration.step}", "cat": "step", "ph": "X", "ts": 0.0, "dur": span * us,
                       "pid": pid, "tid": 0, "args": {"step": iteration.step}})
        events.append({"name": "optimizer step", "cat": "optimizer", "ph": "X",
                       "ts": iteration.optimizer_start * us, "dur": (span - iteration.optimizer_start) * us,
                       "pid": pid, "tid": 0, "args": {}})
        other.update(step=iteration.step, iteration_time_s=iteration.seconds)
    other["makespan_s"] = span * seconds_per_unit
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": other}


def _meta(pid: int, tid: int, name: str, value, key: str = "name") -> list[dict]:
    return [{"ph": "M", "name": name, "pid": pid, "tid": tid, "args": {key: value}}]


def write_trace(timeline: Timeline, path: str | os.PathLike, seconds_per_unit: float = 1.0, *,
                transfers: Sequence[Transfer] = (), iteration: Iteration | None = None) -> None:
    """Write `trace_events(...)` to `path` (atomically)."""
    write_json_atomic(path, trace_events(timeline, seconds_per_unit, transfers=transfers, iteration=iteration))


_PHASES = {"X", "M"}
_META = {"process_name", "process_sort_index", "thread_name", "thread_sort_index"}


def check_trace_events(data) -> None:
    """Raise ScheduleError unless `data` is trace-event JSON as this module writes it
    and Perfetto / chrome://tracing read it: an object with a "traceEvents" list;
    complete events ("X") with a name, numeric ts >= 0 and dur >= 0, integer pid and
    tid; metadata events ("M") of the four kinds named here with their args; slices
    on one track either nested or disjoint (a slice partly overlapping another on
    its track is drawn wrong); every track that holds slices named."""
    if not isinstance(data, dict) or not isinstance(data.get("traceEvents"), list):
        raise ScheduleError("trace: not an object with a traceEvents list")
    named, slices = set(), {}
    for i, e in enumerate(data["traceEvents"]):
        where = f"trace event {i}"
        if not isinstance(e, dict) or e.get("ph") not in _PHASES:
            raise ScheduleError(f"{where}: not an event with ph in {sorted(_PHASES)}")
        if not all(isinstance(e.get(k), int) and not isinstance(e.get(k), bool) for k in ("pid", "tid")):
            raise ScheduleError(f"{where}: pid and tid must be integers")
        if e["ph"] == "M":
            key = "sort_index" if e.get("name", "").endswith("sort_index") else "name"
            if e.get("name") not in _META or key not in (e.get("args") or {}):
                raise ScheduleError(f"{where}: metadata {e.get('name')!r} without args.{key}")
            if e["name"] == "thread_name":
                named.add((e["pid"], e["tid"]))
            continue
        ts, dur = e.get("ts"), e.get("dur")
        if not isinstance(e.get("name"), str) or not all(isinstance(v, (int, float)) for v in (ts, dur)) \
                or ts < 0 or dur < 0:
            raise ScheduleError(f"{where}: a complete event needs a name, ts >= 0 and dur >= 0")
        slices.setdefault((e["pid"], e["tid"]), []).append((ts, -dur, e["name"]))
    for key, spans in slices.items():
        if key not in named:
            raise ScheduleError(f"trace: track pid {key[0]} tid {key[1]} holds slices but has no thread_name")
        open_ends: list[float] = []
        for ts, neg, name in sorted(spans):
            end = ts - neg
            while open_ends and open_ends[-1] <= ts + 1e-3:
                open_ends.pop()
            if open_ends and end > open_ends[-1] + 1e-3:
                raise ScheduleError(f"trace: slice {name!r} on pid {key[0]} tid {key[1]} overlaps the slice "
                                    "it starts in without nesting")
            open_ends.append(end)
