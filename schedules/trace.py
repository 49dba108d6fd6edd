"""Chrome trace-event JSON of any Timeline (simulated or measured): open it in
ui.perfetto.dev or chrome://tracing.

Format (the Trace Event Format's JSON object form): {"traceEvents": [...],
"displayTimeUnit": "ms", "otherData": {...}}. Every op is one complete event
("ph": "X") with "ts" and "dur" in microseconds; a device is a process ("pid" =
device index, named "device d (stages ...)") with one thread ("tid") per lane:
0 compute (F, B, I, W), 1 host out (SO), 2 host in (SI). Process and thread names
and sort orders are metadata events ("ph": "M"). Each event's "name" is the
action as the timeline prints it ("F3", or "2F3" with several stages on a
device); "cat" is its kind; "args" hold stage, micro-batch and the recompute part.

`seconds_per_unit` converts timeline time to seconds (1: the timeline is in
seconds, as measured ones are; simulated unit-cost timelines then show one unit
as one second).
"""
from __future__ import annotations

import os

from schedules.ir import Kind
from schedules.jsonio import write_json_atomic
from schedules.timeline import Timeline

LANES = {Kind.SO: (1, "host out (SO)"), Kind.SI: (2, "host in (SI)")}
COMPUTE_LANE = (0, "compute")


def trace_events(timeline: Timeline, seconds_per_unit: float = 1.0) -> dict:
    """The trace-event JSON object of `timeline`."""
    us = 1e6 * seconds_per_unit
    events = []
    for d in range(timeline.num_devices):
        ops = timeline.device_ops(d)
        stages = sorted({o.stage for o in ops})
        name = f"device {d}" + (f" (stages {', '.join(map(str, stages))})" if not timeline.one_stage_per_device
                                else f" (stage {d})")
        events.append({"ph": "M", "name": "process_name", "pid": d, "tid": 0, "args": {"name": name}})
        events.append({"ph": "M", "name": "process_sort_index", "pid": d, "tid": 0, "args": {"sort_index": d}})
        lanes = {COMPUTE_LANE} | {LANES[o.kind] for o in ops if o.kind in LANES}
        for tid, lane in sorted(lanes):
            events.append({"ph": "M", "name": "thread_name", "pid": d, "tid": tid, "args": {"name": lane}})
            events.append({"ph": "M", "name": "thread_sort_index", "pid": d, "tid": tid,
                           "args": {"sort_index": tid}})
        for o in ops:
            tid = LANES.get(o.kind, COMPUTE_LANE)[0]
            args = {"stage": o.stage, "microbatch": o.microbatch}
            if o.recompute:
                args["recompute_us"] = o.recompute * us
            events.append({"name": timeline.label(o), "cat": o.kind.value, "ph": "X", "ts": o.start * us,
                           "dur": o.duration * us, "pid": d, "tid": tid, "args": args})
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"name": timeline.name, "makespan_s": timeline.makespan * seconds_per_unit,
                          "num_stages": timeline.num_stages, "num_devices": timeline.num_devices}}


def write_trace(timeline: Timeline, path: str | os.PathLike, seconds_per_unit: float = 1.0) -> None:
    write_json_atomic(path, trace_events(timeline, seconds_per_unit))
