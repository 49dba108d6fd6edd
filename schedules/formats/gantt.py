"""Gantt charts of timelines, to time scale, in the style of the paper's figures.

Rows are devices (device 0 on top; with one stage per device, row d is stage d).
Compute bars: forward (blue), full backward (green), input-grad half I (olive),
weight-grad half W (teal), the recompute part of a backward (red, hatched, drawn
first: a backward re-runs its forward before differentiating). With several stages
on a device, a later chunk's bars are lighter and labelled "mb/stage". Two thin
lanes under each row show the host links: swap-out (orange) and swap-in (purple).
Idle time is shaded by the paper's bubble classes: forward bubble (yellow),
backward bubble (pink), other idle (grey). A timeline that ends with its optimizer
step (Timeline.optimizer: measured runs, and simulations with per-stage optimizer
costs) draws it on every device (dark grey) after the last action, so the chart
spans the whole iteration and its title gives the iteration time, the number the
reports print; without one the title gives the makespan.
The time axis says its unit: `time_unit="s"` for timelines in seconds (measured
ones, or simulated from measured costs; drawn in ms below one second), else the
unit of the costs the simulation used (default "cost units", e.g. f = 1).
A measured timeline shows recompute once its backwards carry their measured share
(schedules.timeline.with_recompute_shares).

A large timeline (more than RASTER_OPS ops on one panel) is drawn as one raster
image per panel instead of one vector bar per op, without per-op labels: the same
colours and time axis, a PNG drawn in about a second and an SVG of one embedded
image instead of tens of megabytes of rectangles.

matplotlib is imported here only, and only the object-oriented API (no pyplot
state), so drawing works headless and inside tests.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Sequence

from schedules.ir import Kind
from schedules.formats.jsonio import replace_atomically
from schedules.sizes import format_seconds
from schedules.timeline import Timeline, idle_intervals

COLORS = {"F": "#4C72B0", "B": "#55A868", "I": "#8C9A3A", "R": "#C44E52", "W": "#64B5CD", "SO": "#DD8452",
          "SI": "#8172B3", "OPT": "#5A5A5A", "forward_bubble": "#F6E58D", "backward_bubble": "#F8C5D0",
          "idle": "#ECECEC"}


RASTER_OPS = 3000           # ops per panel above which bars are rasterised (no labels)
RASTER_WIDTH = 4000         # pixels along the time axis of a rasterised panel
_ROW_PX = 20                # pixel rows per device of a rasterised panel


def _rgb(color: str) -> tuple[int, int, int]:
    return tuple(int(color[i:i + 2], 16) for i in (1, 3, 5))


def _draw_raster(ax, timeline: Timeline, xmax: float) -> None:
    """Every bar of `timeline` painted into one image (rows: devices, device 0 on top;
    the same layout as the vector bars: the compute band in the middle 60% of a row,
    the SO and SI lanes under it), shown with imshow on the same axes."""
    import numpy as np  # lazy: only large charts need it

    n = timeline.num_devices
    img = np.full((n * _ROW_PX, RASTER_WIDTH, 3), 255, np.uint8)
    scale = RASTER_WIDTH / xmax if xmax > 0 else 0.0

    def paint(row0: int, row1: int, a: float, b: float, color: str) -> None:
        x0 = min(RASTER_WIDTH - 1, max(0, int(a * scale)))
        img[row0:row1, x0:max(x0 + 1, min(RASTER_WIDTH, int(round(b * scale))))] = _rgb(color)

    band = (int(0.2 * _ROW_PX), int(0.8 * _ROW_PX))
    for d in range(n):
        top = d * _ROW_PX
        ops = timeline.device_ops(d)
        chunk_of = {s: i for i, s in enumerate(sorted({o.stage for o in ops}))}
        for a, b, label in _idle(timeline, d, ops):
            paint(top + band[0], top + band[1], a, b, COLORS.get(label, COLORS["idle"]))
        for a, b in _optimizer_span(timeline, d):
            paint(top + band[0], top + band[1], a, b, COLORS["OPT"])
        for o in ops:
            k = o.kind.value
            if k in ("SO", "SI"):
                lane = top + band[1] + (1 if k == "SO" else 3)
                paint(lane, lane + 2, o.start, o.end, COLORS[k])
                continue
            paint(top + band[0], top + band[1], o.start, o.end, _lighter(COLORS[k], chunk_of[o.stage]))
            if o.recompute > 0:
                paint(top + band[0], top + band[1], o.start, o.start + o.recompute, COLORS["R"])
    ax.imshow(img, extent=(0, xmax, -0.5, n - 0.5), aspect="auto", interpolation="nearest",
              origin="upper")


_BAND_ORDER = ("idle", "SO", "SI", "op", "R")   # drawing order: a recompute part over its backward


def _lighter(color: str, chunk: int) -> str:
    """The colour mixed with white, more for later chunks of a device."""
    if chunk == 0:
        return color
    mix = min(0.6, 0.3 * chunk)
    rgb = [int(color[i:i + 2], 16) for i in (1, 3, 5)]
    return "#" + "".join(f"{round(c + (255 - c) * mix):02X}" for c in rgb)


def _idle(timeline: Timeline, device: int, ops) -> list[tuple[float, float, str]]:
    """The device's idle stretches over the whole iteration: those before its last
    action ends, and the rest of the iteration it does not step its optimizer."""
    out = idle_intervals(ops, timeline.makespan)
    step = timeline.optimizer
    if step is not None:
        busy = _optimizer_span(timeline, device)
        if step.start > timeline.makespan:
            out.append((timeline.makespan, step.start, "idle_after"))
        after = busy[0][1] if busy else step.start
        if step.end > after:
            out.append((after, step.end, "idle_after"))
    return out


def _optimizer_span(timeline: Timeline, device: int) -> list[tuple[float, float]]:
    step = timeline.optimizer
    if step is None or step.seconds[device] <= 0:
        return []
    return [(step.start, step.start + step.seconds[device])]


def _axis_unit(time_unit: str | None, xmax: float) -> tuple[float, str]:
    """(factor from timeline units to axis units, axis unit name)."""
    if time_unit == "s":
        return (1e3, "ms") if xmax < 1.0 else (1.0, "s")
    return 1.0, time_unit or "cost units"


def _makespan_text(timeline: Timeline, time_unit: str | None) -> str:
    """'iteration 83.8 ms (optimizer step included)' (the reports' iteration time, in
    their format) or, without an optimizer step, 'makespan 27 cost units'."""
    if timeline.optimizer is None:
        t, what = timeline.makespan, "makespan"
    else:
        t, what = timeline.iteration_time, "iteration"
    text = format_seconds(t) if time_unit == "s" else f"{t:.4g} {time_unit or 'cost units'}"
    return f"{what} {text}" + (" (optimizer step included)" if timeline.optimizer is not None else "")


def _draw(ax, timeline: Timeline, title: str | None, xmax: float, time_unit: str | None = None) -> None:
    n = timeline.num_devices
    chunked = not timeline.one_stage_per_device
    raster = len(timeline.ops) > RASTER_OPS
    if raster:
        _draw_raster(ax, timeline, xmax)
    for d in range(0 if raster else n):
        y = n - 1 - d
        ops = timeline.device_ops(d)
        chunk_of = {s: i for i, s in enumerate(sorted({o.stage for o in ops}))}
        # one collection per colour and band (not one per bar): drawing cost grows with artists
        bars: dict[tuple, list] = {}
        for a, b, label in _idle(timeline, d, ops):
            bars.setdefault(("idle", COLORS.get(label, COLORS["idle"])), []).append((a, b - a))
        for a, b in _optimizer_span(timeline, d):
            bars.setdefault(("op", COLORS["OPT"]), []).append((a, b - a))
        for o in ops:
            k = o.kind.value
            if k in ("SO", "SI"):
                bars.setdefault((k, COLORS[k]), []).append((o.start, max(o.duration, 1e-9 * xmax)))
                continue
            bars.setdefault(("op", _lighter(COLORS[k], chunk_of[o.stage])), []).append((o.start, o.duration))
            if o.recompute > 0:
                bars.setdefault(("R", COLORS["R"]), []).append((o.start, o.recompute))
            text = f"{o.microbatch}/{o.stage}" if chunked else str(o.microbatch)
            if o.duration - o.recompute > 0.012 * xmax * (1.8 if chunked else 1.0):
                ax.text(o.start + (o.recompute + o.duration) / 2, y, text, ha="center", va="center",
                        fontsize=6 if chunked else 7, color="white" if chunk_of[o.stage] == 0 else "black",
                        in_layout=False)
        for (band, color), spans in sorted(bars.items(), key=lambda kv: _BAND_ORDER.index(kv[0][0])):
            if band == "idle":
                ax.broken_barh(spans, (y - 0.3, 0.6), color=color, lw=0)
            elif band in ("SO", "SI"):
                ax.broken_barh(spans, (y - 0.38 if band == "SO" else y - 0.49, 0.09), color=color, lw=0)
            else:
                ax.broken_barh(spans, (y - 0.3, 0.6), facecolor=color, edgecolor="white", lw=0.6,
                               hatch="///" if band == "R" else None)
    ax.set_yticks(range(n))
    ax.set_yticklabels(_row_names(timeline)[::-1], fontsize=_TICK_LABEL_PT)
    ax.set_xlim(0, xmax)
    ax.set_ylim(-0.65, n - 0.55)
    _time_axis(ax, time_unit, xmax)
    name = title if title is not None else timeline.name
    # the iteration time first: a long name is what the axes' width cuts off
    ax.set_title(f"{_makespan_text(timeline, time_unit)}: {name}", fontsize=9, loc="left")
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)


def _time_axis(ax, time_unit: str | None, xmax: float) -> None:
    from matplotlib.ticker import FuncFormatter  # lazy: matplotlib only when drawing

    factor, name = _axis_unit(time_unit, xmax)
    if factor != 1.0:
        ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x * factor:g}"))
    ax.set_xlabel(f"time ({name})", fontsize=8)
    ax.tick_params(axis="x", labelsize=7)


def _legend(fig, timelines: Sequence[Timeline]) -> None:
    from matplotlib.patches import Patch  # lazy: matplotlib only when drawing (schedules stays light)

    kinds = {o.kind for t in timelines for o in t.ops}
    items = [("F", "forward")] + ([("B", "backward")] if Kind.B in kinds or Kind.I not in kinds else [])
    if Kind.I in kinds:
        items.append(("I", "input grad"))
    items.append(("R", "recompute"))
    if Kind.W in kinds:
        items.append(("W", "weight grad"))
    if kinds & {Kind.SO, Kind.SI}:
        items += [("SO", "swap out"), ("SI", "swap in")]
    if any(t.optimizer is not None for t in timelines):
        items.append(("OPT", "optimizer step"))
    items += [("forward_bubble", "forward bubble"), ("backward_bubble", "backward bubble"), ("idle", "other idle")]
    fig.legend(handles=[Patch(color=COLORS[k], label=lbl) for k, lbl in items], fontsize=7,
               ncol=len(items), loc="upper center", frameon=False, handlelength=1.2, columnspacing=1.0)


def draw_gantts(timelines: Sequence[Timeline], path_png, titles: Sequence[str | None] | None = None,
                svg: bool = True, same_scale: bool = True, time_unit: str | None = None) -> list[Path]:
    """Stack several timelines in one figure (one panel each), on one time axis by
    default so lengths compare at a glance. `time_unit`: "s" for seconds, else the
    name of the costs' unit (default "cost units"). Returns the files written."""
    from matplotlib.figure import Figure  # lazy: matplotlib only when drawing
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    if not timelines:
        raise ValueError("draw_gantts needs at least one timeline")
    titles = list(titles) if titles is not None else [None] * len(timelines)
    longest = max(t.iteration_time for t in timelines) or 1.0
    heights = [0.45 * t.num_devices + 0.9 for t in timelines]
    width = min(22.0, max(8.0, 0.11 * max(len(t.ops) / max(t.num_devices, 1) for t in timelines) + 5))
    heights = [min(h, 0.2 * t.num_devices + 0.9) if len(t.ops) > RASTER_OPS else h
               for h, t in zip(heights, timelines)]
    fig = Figure(figsize=(width, LEGEND_IN + sum(heights)))
    canvas = FigureCanvasAgg(fig)
    left = LEFT_PAD_IN + max(_text_width_in(canvas, name, _TICK_LABEL_PT) for tl in timelines
                             for name in _row_names(tl))
    top = LEGEND_IN
    for tl, title, height in zip(timelines, titles, heights):
        ax = fig.add_axes(_panel_box(fig, left, top, height))
        _draw(ax, tl, title, longest if same_scale else (tl.iteration_time or 1.0), time_unit)
        top += height
    _legend(fig, timelines)
    return _save(fig, path_png, svg)


# A panel's frame in inches, computed (not measured by tight_layout, which lays the
# whole figure out once more before it is drawn): the row labels' width on the left,
# above each panel its title, under it the time axis's tick labels and name.
LEGEND_IN = 0.35            # the legend's band at the top of the figure
TITLE_IN = 0.3              # a panel's title (9 pt) and its gap to the panel above
TIME_AXIS_IN = 0.5          # tick labels (7 pt), the axis name (8 pt) and their gaps
LEFT_PAD_IN = 0.2           # tick marks and gaps left of the row labels, and the figure's edge
RIGHT_IN = 0.2
_TICK_LABEL_PT = 8


def _panel_box(fig, left: float, top: float, height: float) -> list[float]:
    """[left, bottom, width, height] in figure fractions of a panel whose band starts
    `top` inches under the figure's top and is `height` inches high."""
    width_in, height_in = fig.get_size_inches()
    bottom = height_in - (top + height - TIME_AXIS_IN)
    inner = max(height - TITLE_IN - TIME_AXIS_IN, 0.1)
    return [left / width_in, bottom / height_in, max(width_in - left - RIGHT_IN, 1.0) / width_in,
            inner / height_in]


def _text_width_in(canvas, text: str, points: float) -> float:
    """Inches that `text` takes at `points` in the figure's default font."""
    from matplotlib.font_manager import FontProperties  # lazy: matplotlib only when drawing

    w, _, _ = canvas.get_renderer().get_text_width_height_descent(text, FontProperties(size=points), ismath=False)
    return w / canvas.figure.dpi


def _row_names(timeline: Timeline) -> list[str]:
    """The row labels, device 0 first: stages (one per device) or a device's stages."""
    n = timeline.num_devices
    if timeline.one_stage_per_device:
        return [f"stage {d}" for d in range(n)]
    return [f"device {d} (stages {','.join(str(s) for s in sorted({o.stage for o in timeline.device_ops(d)}))})"
            for d in range(n)]


def draw_gantt(timeline: Timeline, path_png, title: str | None = None, svg: bool = True,
               time_unit: str | None = None) -> list[Path]:
    """One timeline as a Gantt chart: PNG at `path_png` (and an SVG beside it)."""
    return draw_gantts([timeline], path_png, [title], svg=svg, time_unit=time_unit)


def draw_memory(timeline: Timeline, path_png, title: str | None = None, svg: bool = True,
                unit: float = 1.0, unit_name: str = "bytes", time_unit: str | None = None) -> list[Path]:
    """Resident activation memory over time, one step line per stage (e.g. to show
    what swapping saves). `unit` divides the byte figures (1e9 for GB); `time_unit`
    as in draw_gantts."""
    from matplotlib.figure import Figure  # lazy: matplotlib only when drawing
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    fig = Figure(figsize=(9, 3.2))
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    for s, points in enumerate(timeline.memory):
        if not points:
            continue
        ts = [t for t, _ in points] + [timeline.makespan]
        bs = [b / unit for _, b in points] + [points[-1][1] / unit]
        who = "stage" if timeline.one_stage_per_device else "device"
        ax.step(ts, bs, where="post", lw=1.2,
                label=f"{who} {s} (peak {timeline.stages[s].peak_activation_bytes / unit:.3g})")
    ax.set_xlim(0, timeline.makespan or 1.0)
    _time_axis(ax, time_unit, timeline.makespan or 1.0)
    ax.set_ylabel(f"resident activations ({unit_name})", fontsize=8)
    ax.tick_params(labelsize=7)
    ax.legend(fontsize=7, frameon=False, ncol=2)
    name = title if title is not None else timeline.name
    ax.set_title(f"{name}  ({_makespan_text(replace(timeline, optimizer=None), time_unit)})", fontsize=9,
                 loc="left")
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    fig.tight_layout()
    return _save(fig, path_png, svg)


def _save(fig, path_png, svg: bool) -> list[Path]:
    """Write the figure as PNG (and SVG beside it), each atomically
    (schedules.formats.jsonio.replace_atomically); the paths written."""
    path_png = Path(path_png)
    # draw_memory's tight_layout (done once) leaves a placeholder layout engine, and any engine
    # makes savefig draw the whole figure once more before drawing it to the file
    fig.set_layout_engine(None)
    written = [path_png] + ([path_png.with_suffix(".svg")] if svg else [])
    for path, fmt in zip(written, ("png", "svg")):
        replace_atomically(path, lambda tmp, fmt=fmt: _savefig(fig, tmp, fmt))
    return written


def _savefig(fig, path, fmt: str) -> None:
    """The SVG keeps its text as text (svg.fonttype none), not a path per glyph:
    searchable and editable, a quarter smaller, ~10% less time per chart."""
    from matplotlib import rc_context  # lazy: matplotlib only when drawing

    with rc_context({"svg.fonttype": "none"}):
        fig.savefig(path, format=fmt, dpi=150)
