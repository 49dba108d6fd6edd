"""What the paper-figure scripts share: their flags, the profiles they plan on (with
the warnings to print), CSV and PNG output. The numbers come from experiments.figures
and experiments.paper; this module only parses, prints and draws.

matplotlib is used through its object-oriented API only (no pyplot state).
"""
from __future__ import annotations

import csv
import os
import sys
from pathlib import Path
from typing import Callable, Iterable, Sequence

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from obscura_jax.cli.main import run_command
from obscura_jax.errors import UsageError
from experiments.figures import Source, load_source, run_tasks, source_text
from planner.identify import parse_memory_limit
from experiments.paper import FAMILIES, NUM_STAGES, PAPER_LIMIT, SIZES
from schedules.formats.jsonio import replace_atomically

# Figures go here unless --out says otherwise: never over the committed results/figures.
FIGURES_OUT = "figures_out"


def write_csv(path, rows: Sequence[dict]) -> Path:
    """CSV of `rows` (columns: every key, first-seen order; None -> empty)."""
    fields = list(dict.fromkeys(k for r in rows for k in r))

    def write(tmp: str) -> None:
        with open(tmp, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=fields)
            w.writeheader()
            w.writerows({k: _cell(r.get(k)) for k in fields} for r in rows)
    return replace_atomically(Path(path), write)


def _cell(v):
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:.6g}"
    return v


def new_figure(nrows: int, ncols: int, size: tuple[float, float]):
    """(Figure, 2-D array of axes), headless, no pyplot state."""
    fig = Figure(figsize=size)
    FigureCanvasAgg(fig)
    axes = fig.subplots(nrows, ncols, squeeze=False)
    return fig, axes


def style_throughput_panel(ax, batches: Sequence[int], top: float, headroom: float, title: str,
                           first_column: bool) -> None:
    """One panel of samples/s bars per global batch (fig12, fig_zoo): ticks, room
    above the tallest bar for its labels, the title; the y label on the first column."""
    ax.set_xticks(range(len(batches)))
    ax.set_xticklabels([f"GBS {b}" for b in batches], fontsize=7)
    ax.set_ylim(0, top * headroom)
    ax.tick_params(axis="y", labelsize=7)
    ax.set_title(title, fontsize=9, loc="left")
    if first_column:
        ax.set_ylabel("samples / s (simulated)", fontsize=8)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)


def save_figure(fig, out_dir, stem: str, title: str, sources: Iterable[Source]) -> Path:
    """Title on top, 'simulated from <source>' at the bottom (red unless every
    source is a measured profile without cautions); returns the PNG's path."""
    sources = list(sources)
    fig.suptitle(title, fontsize=10, x=0.01, ha="left")
    color = "black" if all(s.measured and not s.caution for s in sources) else "#B00020"
    fig.text(0.01, 0.005, source_text(sources), fontsize=6.5, ha="left", va="bottom", color=color, wrap=True)
    fig.tight_layout(rect=(0, 0.05, 1, 0.95))
    fig.set_layout_engine(None)     # a placeholder engine would make savefig draw everything twice
    return replace_atomically(Path(out_dir) / f"{stem}.png",
                              lambda tmp: fig.savefig(tmp, dpi=110, format="png"))


def load_sources(families: Sequence[str], profile_dir, analytic: str | None) -> list[Source]:
    """experiments.figures.load_source for each family, printing its warning on stderr."""
    sources = [load_source(f, profile_dir, analytic) for f in families]
    for s in sources:
        if s.warning:
            print(s.warning, file=sys.stderr)
    return sources


def add_common_args(ap, default_sizes: str, default_batches: str, families: str = "llama2,gpt3") -> None:
    ap.add_argument("--out", default=FIGURES_OUT,
                    help=f"output folder (default {FIGURES_OUT}; the committed figures regenerate only "
                         "when asked: --out results/figures)")
    ap.add_argument("--profile-dir", default="results/h200",
                    help="folder with profile_<family>-13b.json (default results/h200); "
                         "missing files fall back to an analytic profile, labelled as such")
    ap.add_argument("--analytic", metavar="DEVICE", default=None,
                    help="ignore measured profiles and use the analytic one for DEVICE (H200, A100-80GB)")
    ap.add_argument("--families", default=families, help=f"model families (default {families})")
    ap.add_argument("--sizes", default=default_sizes, help=f"model sizes (default {default_sizes})")
    ap.add_argument("--batches", default=default_batches, help=f"global batch sizes (default {default_batches})")
    ap.add_argument("--memory-limit", default=PAPER_LIMIT, help=f"per-GPU limit (default {PAPER_LIMIT}, the paper's A100)")
    ap.add_argument("--reserve", default="0", metavar="SIZE",
                    help="keep this much of the limit free for what the memory model does not count (default 0)")
    ap.add_argument("--stages", type=int, default=NUM_STAGES, help=f"pipeline stages p (default {NUM_STAGES})")
    ap.add_argument("--jobs", type=int, default=max(1, min(4, os.cpu_count() or 1)), help="planning processes (default: CPU count, max 4)")


def _parse_list(text: str, what: str, known: Iterable[str] | None = None) -> list[str]:
    items = [t.strip().lower() for t in text.split(",") if t.strip()]
    bad = [t for t in items if known is not None and t not in known]
    if not items or bad:
        raise UsageError(f"--{what} is empty" if not items else
                         f"unknown {what} {bad[0]!r} (known: {', '.join(known)})")
    return items


def common_inputs(args) -> tuple[list[str], list[str], list[int]]:
    """(families, sizes, batches) from add_common_args' options, every option
    checked before any planning starts."""
    batches = _parse_list(args.batches, "batches")
    for t in batches:
        if not t.isdigit() or int(t) < 1:
            raise UsageError(f"global batch {t!r} is not a positive integer")
    parse_memory_limit(args.memory_limit)
    if str(args.reserve) != "0":
        parse_memory_limit(args.reserve)
    for what, v in (("stages", args.stages), ("jobs", args.jobs)):
        if v < 1:
            raise UsageError(f"--{what} must be >= 1, got {v}")
    return (_parse_list(args.families, "families", FAMILIES), _parse_list(args.sizes, "sizes", SIZES),
            [int(t) for t in batches])


def publish(out_dir, stem: str, rows: Sequence[dict], sources: Sequence[Source],
            draw: Callable[[], Path], report: Iterable[str]) -> int:
    """Write <stem>.csv, then draw the PNG (draw() returns its path), then print
    where the numbers come from, the report lines and what was written."""
    csv_path = write_csv(f"{out_dir}/{stem}.csv", rows)
    png = draw()
    print(source_text(sources))
    for line in report:
        print(line)
    print(f"wrote {png}\nwrote {csv_path}")
    return 0


def per_case_figure(prog: str, args, row_fn: Callable[..., list[dict]], draw, table) -> int:
    """The main shared by per-(model, batch) figures (Figs. 13, 14): plan every
    case, write <prog>.csv, draw, print one table per case."""
    def body() -> int:
        families, sizes, batches = common_inputs(args)
        sources = load_sources(families, args.profile_dir, args.analytic)
        tasks = [(src, size, b, args.memory_limit, args.stages, args.reserve)
                 for src in sources for size in sizes for b in batches]
        rows = run_tasks(row_fn, tasks, args.jobs)
        cases = list(dict.fromkeys((r["model"], r["global_batch"]) for r in rows))
        return publish(args.out, prog, rows, sources, lambda: draw(rows, sources, cases, args.out),
                       ["\n".join(table(rows, model, batch)) for model, batch in cases])

    return run_command(prog, body)
