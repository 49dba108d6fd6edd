"""Plain-text views of schedules and timelines: the device x step grid (used by the
validator's error messages and by the golden files) and a time-scaled ASCII chart.

    step     0   1   2   3    4   5          one column per position in a device's row;
    stage 0  F0  F1  F2  F3  [B0] F4  ...    a marked cell is the action a check names
    stage 1  F0  F1  F2  B0   F3  B1  ...  <- missing B7

With one stage per device the rows are named by stage and actions print short; with
several stages on a device rows are "device d" and actions print stage first (2F0).
"""
from __future__ import annotations

from typing import Iterable, Mapping, Sequence


def format_grid(rows: Sequence[Sequence[str]],
                marks: Iterable[tuple[int, int]] = (),
                notes: Mapping[int, str] | None = None,
                labels: Sequence[str] | None = None) -> str:
    """Render rows of action strings as an aligned stage x step grid.

    `marks` holds (stage, index) cells to show as `[X]`; `notes` maps a stage to a
    remark printed after its row (e.g. an action that is missing altogether).
    """
    marks = set(marks)
    notes = dict(notes or {})
    cells = [[f"[{a}]" if (s, i) in marks else f" {a} " for i, a in enumerate(row)]
             for s, row in enumerate(rows)]
    steps = max((len(r) for r in cells), default=0)
    widths = [max([len(str(j)) + 2] + [len(r[j]) for r in cells if j < len(r)]) for j in range(steps)]
    labels = list(labels) if labels is not None else [f"stage {s}" for s in range(len(rows))]
    head_w = max([len("step")] + [len(lbl) for lbl in labels])
    lines = [("step".ljust(head_w) + " " + "".join(f"{j} ".rjust(w) for j, w in enumerate(widths))).rstrip()]
    for s, row in enumerate(cells):
        line = labels[s].ljust(head_w) + " " + "".join(c.rjust(w) for c, w in zip(row, widths))
        if s in notes:
            line = line.rstrip().ljust(len(lines[0])) + "  <- " + notes[s]
        lines.append(line.rstrip())
    return "\n".join(lines)


_FILL = {"F": "f", "B": "b", "I": "i", "W": "w"}


def timeline_ascii(timeline, unit: float = 1.0) -> str:
    """A time-scaled picture, one character per `unit` of time. Per device, the first
    line shows the kind running (F, B, I, W; R = the recompute part of a B or I;
    . = idle), the second the micro-batch (0-9a-z) where an op starts and - while it
    runs; with several stages on a device a third line shows the op's stage (0-9a-z)
    the same way. Swaps, which use the host links and not the compute stream, are
    listed below.

        stage 0 |FFFF......BBFBBFBBF...|        device 0 |FFFFFFFF..FBFBF...|
                |0123      0-41-52-6...|                 |01230123  40516...|
                                                         |00001111  01010...|
    """
    width = int(round(timeline.makespan / unit))
    chunked = not timeline.one_stage_per_device
    out = []
    for d in range(timeline.num_devices):
        kinds = ["."] * width
        mbs = [" "] * width
        stages = [" "] * width
        for op in timeline.device_ops(d):
            if op.kind.value not in _FILL:
                continue
            a, b = int(round(op.start / unit)), int(round(op.end / unit))
            r = int(round((op.start + op.recompute) / unit))
            for t in range(a, min(b, width)):
                kinds[t] = "R" if t < r else op.kind.value
                mbs[t] = _digit(op.microbatch) if t == a else "-"
                stages[t] = _digit(op.stage) if t == a else "-"
        head = f"device {d} " if chunked else f"stage {d} "
        out.append(f"{head}|{''.join(kinds)}|")
        out.append(f"{' ' * len(head)}|{''.join(mbs)}|")
        if chunked:
            out.append(f"{' ' * len(head)}|{''.join(stages)}|")
    swaps = [op for op in timeline.ops if op.kind.value in ("SO", "SI")]
    if swaps:
        out.append("swaps: " + " ".join(f"s{op.stage}:{op.action}@{op.start:g}-{op.end:g}" for op in swaps))
    return "\n".join(out)


def _digit(x: int) -> str:
    return "0123456789abcdefghijklmnopqrstuvwxyz"[x] if x < 36 else "+"


def pipeline_shape(stages_per_device: Sequence[int]) -> str:
    """'4 devices, 16 model stages (4 per device)': the words every report's header
    uses for a pipeline (devices = the schedule's rows; model stages = what the
    partition cuts the model into)."""
    counts = list(stages_per_device)
    lo, hi = min(counts, default=0), max(counts, default=0)
    per = f"{lo}" if lo == hi else f"{lo}-{hi}"
    return (f"{len(counts)} device{'s' if len(counts) != 1 else ''}, {sum(counts)} model "
            f"stage{'s' if sum(counts) != 1 else ''} ({per} per device)")
