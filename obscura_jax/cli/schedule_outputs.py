"""The files a simulated schedule can be written as, shared by `simulate` and `plan`:
the schedule JSON (obscura-schedule/2), torch's compute_only CSV, a Perfetto trace,
a Gantt chart (PNG + SVG) and the StageCosts JSON it was simulated with."""
from __future__ import annotations

import sys

from schedules.formats import io
from schedules.formats.jsonio import write_json_atomic
from schedules.formats.torch_csv import save_torch_csv
from schedules.formats.trace import write_trace


def write_outputs(args, schedule, timeline, costs=None, title: str | None = None) -> None:
    """Write what `args` asks for (None: not written), a line for each file."""
    if getattr(args, "schedule_json", None):
        io.save_schedule(schedule, args.schedule_json)
        print(f"wrote {args.schedule_json}")
    if getattr(args, "torch_csv", None):
        lost: list[str] = []
        save_torch_csv(schedule, args.torch_csv, notes=lost)
        print(f"wrote {args.torch_csv}")
        for line in lost:
            print(f"warning: {line}", file=sys.stderr)
    if getattr(args, "costs_json", None) and costs is not None:
        write_json_atomic(args.costs_json, costs.to_json())
        print(f"wrote {args.costs_json}")
    if getattr(args, "trace", None):
        write_trace(timeline, args.trace)
        print(f"wrote {args.trace}")
    if getattr(args, "gantt", None):
        from schedules.formats.gantt import draw_gantt  # lazy: matplotlib only when drawing
        for path in draw_gantt(timeline, args.gantt, title):
            print(f"wrote {path}")
