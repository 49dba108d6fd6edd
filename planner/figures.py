"""What the paper-figure scripts (scripts/fig12_*.py .. fig16_*.py) share: the
profile a figure is simulated from, the paper's numbers, the planning runs that
become CSV rows, and CSV/PNG output.

Every figure is SIMULATED: the planner (planner.plan.plan_search) judges each
configuration with schedules.simulate on per-unit costs from a profile. The
profile is the measured H200 one (`<profile-dir>/profile_<model>-13b.json`) when
it exists; otherwise an analytic roofline profile (planner.analytic) stands in,
and every label says so loudly. The paper's 18/23/28B models are the 13B shape
with 56/72/88 layers (derive_profile), as in the paper.

matplotlib is imported only inside the drawing helpers, object-oriented API only.
"""
from __future__ import annotations

import csv
import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from planner.errors import InfeasibleError, ProfileError
from planner.identify import parse_memory_limit
from planner.profile import Profile, derive_profile, load_profile

GIB = 2 ** 30
NUM_STAGES = 8                      # the paper's p (8x A100-80GB)
SEQ_LEN, MICRO_BATCH = 4096, 1
PAPER_LIMIT = "80GiB"               # the A100-80GB the paper ran on
H200_LIMIT = "143771MiB"            # nvidia-smi's total on the lent H200 (device-notes.md)
SIZES = {"13b": 40, "18b": 56, "23b": 72, "28b": 88}   # layers (models/config.py)
FAMILIES = {"llama2": "Llama-2", "gpt3": "GPT-3"}
SYSTEMS = {"dapple": "DAPPLE", "dapple_plus": "DAPPLE+", "recomp": "Recomp-N",
           "ohp_cmb": "OHP-CMB", "strawman": "Strawman", "obscura": "Obscura"}
# Speedup of Obscura over DAPPLE+ in the paper (spec section 9), over global batch 16/32/64.
PAPER_SPEEDUP = {("llama2", "18b"): (1.29, 1.31), ("llama2", "23b"): (1.29, 1.31),
                 ("llama2", "28b"): (1.22, 1.27), ("gpt3", "18b"): (1.32, 1.33),
                 ("gpt3", "23b"): (1.32, 1.33), ("gpt3", "28b"): (1.30, 1.32)}
# Ablation (Fig. 16): each step adds one of the paper's components to the last.
ABLATION_STEPS = (("relaxation", "relaxation only"), ("swap_recompute", "+ swapping-aware recompute"),
                  ("partition", "+ partition adjustment"), ("cmb", "+ CMB-Identifying (= Obscura)"))
# The planner runs behind them: "no_cmb" gives two steps (its even-partition best is
# exactly what partition=False would return, its final best adds Algorithm 1).
ABLATION_RUNS = {"relaxation": dict(cmb=False, swap=False, ip=False, partition=False),
                 "no_cmb": dict(cmb=False, swap=True, ip=True, partition=True),
                 "obscura": dict(cmb=True, swap=True, ip=True, partition=True)}


# Recomputing every op of a layer unit redoes its forward, so the ops' fwd_time
# should sum to about the unit's; far below it, selective recompute is priced as
# nearly free and the figures must say so.
RECOMPUTE_SUM_WARN = 0.25


@dataclass(frozen=True)
class Source:
    """The 13B profile a figure is simulated from, and how to say so."""
    family: str
    profile: Profile
    measured: bool
    label: str
    caution: str = ""    # what about the profile a reader must know (empty: nothing)

    def sized(self, size: str) -> Profile:
        """The paper's `size` model: the 13B profile with more layers."""
        if size not in SIZES:
            raise ValueError(f"unknown model size {size!r} (known: {', '.join(SIZES)})")
        return derive_profile(self.profile, SIZES[size], f"{self.family}-{size}")


def load_source(family: str, profile_dir, analytic: str | None = None) -> Source:
    """The measured `<profile_dir>/profile_<family>-13b.json`, or (missing, or
    `analytic` names a device) an analytic roofline profile, with a warning on
    stderr. A profile that exists but is malformed or of another family is an error."""
    if family not in FAMILIES:
        raise ValueError(f"unknown model family {family!r} (known: {', '.join(FAMILIES)})")
    path = Path(profile_dir) / f"profile_{family}-13b.json"
    if analytic is None and path.exists():
        prof = load_profile(path)
        if not prof.model.startswith(family):
            raise ProfileError(f"profile {path} is of model {prof.model!r}, expected {family}-13b")
        what = "measured" if not prof.device.startswith("analytic") else "analytic (from file)"
        caution = recompute_caution(prof)
        if caution:
            print(f"WARNING: {family}: {caution}", file=sys.stderr)
        return Source(family, prof, what == "measured",
                      f"{what} {prof.device} profile {path} (seq {prof.seq_len}, mb {prof.micro_batch})", caution)
    import models
    from planner.analytic import analytic_profile
    device = analytic or "H200"
    prof = analytic_profile(models.get_config(f"{family}-13b"), SEQ_LEN, MICRO_BATCH, device=device)
    why = "requested" if analytic else f"{path} missing"
    label = f"ANALYTIC {device} roofline profile, NOT measured ({why})"
    print(f"WARNING: {family}: figures use an {label}", file=sys.stderr)
    return Source(family, prof, False, label)


def recompute_caution(profile: Profile) -> str:
    """A warning when the layer units' per-op recompute times sum to far less
    than their forward (RECOMPUTE_SUM_WARN), else ''."""
    low = []
    for kind in ("attn", "mlp"):
        unit = profile.unit(kind)
        total = sum(op.fwd_time for _, op in unit.ops)
        if unit.ops and unit.fwd_time > 0 and total < RECOMPUTE_SUM_WARN * unit.fwd_time:
            low.append(f"{kind} {100 * total / unit.fwd_time:.1f}%")
    if not low:
        return ""
    return ("per-op recompute times sum to " + ", ".join(low) + " of the unit forward: "
            "selective recompute is priced as nearly free")


def source_text(sources: Iterable[Source]) -> str:
    """One line for a figure: 'simulated from <profile source>[; ...]', with any caution."""
    return "simulated from " + "; ".join(
        f"{FAMILIES[s.family]}: {s.label}" + (f" [CAUTION: {s.caution}]" if s.caution else "") for s in sources)


def plan_case(profile: Profile, num_microbatches: int, memory_limit, num_stages: int = NUM_STAGES,
              reserve=0, **switches):
    """planner.plan.plan_search, or None when no configuration fits the limit
    (less `reserve`, held back for what the memory model does not count)."""
    from planner.plan import plan_search
    try:
        return plan_search(profile, num_stages, num_microbatches, memory_limit, reserve=reserve, **switches)
    except InfeasibleError:
        return None


def _plan_or_raise(prof: Profile, global_batch: int, limit: int, num_stages: int, reserve):
    result = plan_case(prof, global_batch, limit, num_stages, reserve)
    if result is None:
        raise InfeasibleError(f"{prof.model} at global batch {global_batch} does not fit "
                              f"{limit / GIB:.2f} GiB in any configuration")
    return result


def evaluations(result) -> dict[str, Any]:
    """Every system of a plan search by name: the baselines and 'obscura'."""
    return {**result.baselines, "obscura": result.best}


def throughput_rows(source: Source, size: str, global_batch: int, memory_limit, num_stages: int,
                    reserve=0) -> list[dict]:
    """Fig. 12: one row per system (m = global batch at micro-batch 1); a system
    that does not fit has no iteration time ('OOM'). The ceiling is DAPPLE's
    speedup had it fit: no recompute, memory unlimited."""
    prof = source.sized(size)
    limit = parse_memory_limit(memory_limit)
    result = plan_case(prof, global_batch, limit, num_stages, reserve)
    evs = evaluations(result) if result is not None else {}
    plus = evs.get("dapple_plus")
    t_plus = plus.makespan if plus is not None and plus.fits else None
    at_paper_limit = limit == parse_memory_limit(PAPER_LIMIT)
    paper = PAPER_SPEEDUP.get((source.family, size), (None, None)) if at_paper_limit else (None, None)
    rows = []
    for name in SYSTEMS:
        ev = evs.get(name)
        fits = ev is not None and ev.fits
        t = ev.makespan if fits else None
        samples = global_batch / t if t else None
        rows.append({
            "family": source.family, "model": prof.model, "global_batch": global_batch,
            "num_stages": num_stages, "memory_limit_gib": round(limit / GIB, 3), "system": name,
            "fits": fits, "iteration_s": t, "samples_per_s": samples,
            "tokens_per_s": samples * prof.seq_len * prof.micro_batch if samples else None,
            "speedup_vs_dapple_plus": t_plus / t if t and t_plus else None,
            "ceiling_vs_dapple_plus": t_plus / evs["dapple"].makespan if t_plus and "dapple" in evs else None,
            "paper_speedup_low": paper[0] if name == "obscura" else None,
            "paper_speedup_high": paper[1] if name == "obscura" else None,
            "max_stage_peak_gib": max(ev.peaks) / GIB if ev is not None else None,
            "obscura_schedule": result.plan.schedule if result is not None else "infeasible",
            "obscura_adjusted": " ".join(map(str, result.plan.adjusted_stages)) if result is not None else "",
            "obscura_source": result.source if result is not None else "",
            "order": order_kind(ev) if ev is not None else "",
            "profile": source.label})
    return rows


def memory_rows(source: Source, size: str, global_batch: int, memory_limit, num_stages: int,
                reserve=0) -> list[dict]:
    """Fig. 13: per system and stage, predicted peak = weights (params, grads,
    optimizer state) + activations + the recompute working set."""
    prof = source.sized(size)
    limit = parse_memory_limit(memory_limit)
    result = _plan_or_raise(prof, global_batch, limit, num_stages, reserve)
    rows = []
    for name, ev in evaluations(result).items():
        for s in range(num_stages):
            w, a, k = ev.costs.weight_bytes[s], ev.activation_bytes[s], ev.working_bytes[s]
            rows.append({"model": prof.model, "global_batch": global_batch, "system": name, "stage": s,
                         "units": "%d-%d" % ev.config.partition[s], "weights_gib": w / GIB,
                         "activations_gib": a / GIB, "working_gib": k / GIB, "peak_gib": ev.peaks[s] / GIB,
                         "memory_limit_gib": limit / GIB, "usable_gib": ev.memory_limit / GIB,
                         "fits": ev.peaks[s] <= ev.memory_limit,
                         "recompute": " ".join(sorted(ev.config.recompute[s])) or "-",
                         "swap_blocks": ev.config.swap_blocks[s], "profile": source.label})
    return rows


def stage_time_rows(source: Source, size: str, global_batch: int, memory_limit, num_stages: int,
                    reserve=0, systems: Sequence[str] = ("dapple_plus", "strawman", "obscura")) -> list[dict]:
    """Fig. 14: per system and stage, compute (incl. recompute), bubble and total,
    where total is when the stage finishes its last op and bubble = total - compute
    (all the time it idles before that, the start-up wait included)."""
    prof = source.sized(size)
    limit = parse_memory_limit(memory_limit)
    result = _plan_or_raise(prof, global_batch, limit, num_stages, reserve)
    evs = evaluations(result)
    rows = []
    for name in systems:
        ev = evs[name]
        tl = ev.timeline
        for s, st in enumerate(tl.stages):
            finish = max(o.end for o in tl.stage_ops(s) if o.kind.value in ("F", "B", "W"))
            rows.append({"model": prof.model, "global_batch": global_batch, "system": name, "stage": s,
                         "fits": ev.fits, "compute_s": st.compute, "recompute_s": st.recompute,
                         "bubble_s": finish - st.compute, "forward_bubble_s": st.forward_bubble,
                         "backward_bubble_s": st.backward_bubble, "total_s": finish,
                         "makespan_s": tl.makespan, "swap_s": st.swap, "profile": source.label})
    return rows


def ablation_rows(source: Source, size: str, global_batch: int, memory_limit, num_stages: int,
                  run: str, reserve=0) -> list[dict]:
    """Fig. 16: speedup over DAPPLE+ of the ablation steps one planner run (a key
    of ABLATION_RUNS) yields; the "relaxation" run also gives the strawman and
    the ceiling (DAPPLE, no recompute, memory unlimited). Each step is the
    search's own best (`searched`), even where the planner would hand out a
    faster baseline instead (column plan_source says which)."""
    if run not in ABLATION_RUNS:
        raise ValueError(f"unknown ablation run {run!r} (known: {', '.join(ABLATION_RUNS)})")
    labels = dict(ABLATION_STEPS)
    prof = source.sized(size)
    limit = parse_memory_limit(memory_limit)
    result = plan_case(prof, global_batch, limit, num_stages, reserve, **ABLATION_RUNS[run])
    steps = {"relaxation": ("relaxation",), "no_cmb": ("swap_recompute", "partition"), "obscura": ("cmb",)}[run]
    if result is None:
        found = [(key, labels[key], None, "infeasible") for key in steps]
        t_plus = None
    else:
        searched = result.searched or result.best
        picks = {"swap_recompute": result.even, "partition": searched, "relaxation": searched, "cmb": searched}
        found = [(key, labels[key], picks[key], result.source) for key in steps]
        if run == "relaxation":
            straw, dapple = result.baselines["strawman"], result.baselines["dapple"]
            found += [("strawman", "Strawman", straw if straw.fits else None, "baseline"),
                      ("ceiling", "DAPPLE, memory unlimited (ceiling)", dapple, "baseline")]
        plus = result.baselines["dapple_plus"]
        t_plus = plus.makespan if plus.fits else None
    rows = []
    for key, text, ev, plan_source in found:
        t = ev.makespan if ev is not None else None
        rows.append({"model": prof.model, "global_batch": global_batch, "step": key, "label": text,
                     "iteration_s": t, "dapple_plus_s": t_plus,
                     "speedup_vs_dapple_plus": t_plus / t if t and t_plus else None,
                     "schedule": ev.config.schedule if ev is not None else "",
                     "order": order_kind(ev) if ev is not None else "",
                     "adjusted": " ".join(map(str, ev.config.adjusted)) if ev is not None else "",
                     "partition": " ".join("%d-%d" % u for u in ev.config.partition) if ev is not None else "",
                     "plan_source": plan_source, "memory_limit_gib": limit / GIB, "profile": source.label})
    return rows


def order_kind(ev) -> str:
    """Which F/B order a configuration runs: '1f1b', the generators' own
    'strawman' or 'recomp' order, or 'relaxed' (Obscura's dependency relaxation);
    swap actions are ignored."""
    from schedules import Kind, generate
    cfg = ev.config
    if not cfg.adjusted:
        return "1f1b"
    p, m = len(cfg.partition), ev.schedule.num_microbatches
    rows = tuple(tuple(a for a in st.actions if a.kind in (Kind.F, Kind.B, Kind.W)) for st in ev.schedule.stages)
    for name in ("strawman", "recomp"):
        ref = generate(name, p, m, adjusted=max(cfg.adjusted))
        if rows == tuple(st.actions for st in ref.stages):
            return name
    return "relaxed"


def run_tasks(fn: Callable[..., list[dict]], tasks: Sequence[tuple], jobs: int = 1) -> list[dict]:
    """fn(*task) for every task, concatenated in task order; `jobs` > 1 runs them
    in that many spawned processes (planning is CPU-bound pure Python)."""
    jobs = max(1, min(jobs, len(tasks)))
    if jobs == 1:
        return [row for t in tasks for row in fn(*t)]
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor
    with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn")) as ex:
        parts = list(ex.map(fn, *zip(*tasks)))
    return [row for part in parts for row in part]


def write_csv(path, rows: Sequence[dict]) -> Path:
    """CSV of `rows` (columns: every key, first-seen order; None -> empty)."""
    fields = list(dict.fromkeys(k for r in rows for k in r))

    def write(tmp: str) -> None:
        with open(tmp, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=fields)
            w.writeheader()
            w.writerows({k: _cell(r.get(k)) for k in fields} for r in rows)
    return _atomic(Path(path), write)


def _atomic(path: Path, write: Callable[[str], None]) -> Path:
    """write(temporary name) beside `path`, then rename it over `path`, so an
    existing file is never half-written; permissions as a plain open() would give
    (mkstemp makes files private)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=path.suffix, dir=path.parent)
    os.close(fd)
    try:
        write(tmp)
        mask = os.umask(0)
        os.umask(mask)
        os.chmod(tmp, 0o666 & ~mask)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def _cell(v):
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:.6g}"
    return v


def new_figure(nrows: int, ncols: int, size: tuple[float, float]):
    """(Figure, 2-D array of axes), headless, no pyplot state."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    fig = Figure(figsize=size)
    FigureCanvasAgg(fig)
    axes = fig.subplots(nrows, ncols, squeeze=False)
    return fig, axes


def save_figure(fig, out_dir, stem: str, title: str, sources: Iterable[Source]) -> Path:
    """Title on top, 'simulated from <source>' at the bottom (red unless every
    source is a measured profile without cautions); returns the PNG's path."""
    sources = list(sources)
    fig.suptitle(title, fontsize=10, x=0.01, ha="left")
    color = "black" if all(s.measured and not s.caution for s in sources) else "#B00020"
    fig.text(0.01, 0.005, source_text(sources), fontsize=6.5, ha="left", va="bottom", color=color, wrap=True)
    fig.tight_layout(rect=(0, 0.05, 1, 0.95))
    return _atomic(Path(out_dir) / f"{stem}.png", lambda tmp: fig.savefig(tmp, dpi=110, format="png"))


def add_common_args(ap, default_sizes: str, default_batches: str, families: str = "llama2,gpt3") -> None:
    ap.add_argument("--out", default="results/figures", help="output folder (default results/figures)")
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
        raise ValueError(f"--{what} is empty" if not items else
                         f"unknown {what} {bad[0]!r} (known: {', '.join(known)})")
    return items


def common_inputs(args) -> tuple[list[str], list[str], list[int]]:
    """(families, sizes, batches) from add_common_args' options, every option
    checked before any planning starts."""
    batches = _parse_list(args.batches, "batches")
    for t in batches:
        if not t.isdigit() or int(t) < 1:
            raise ValueError(f"global batch {t!r} is not a positive integer")
    parse_memory_limit(args.memory_limit)
    if str(args.reserve) != "0":
        parse_memory_limit(args.reserve)
    for what, v in (("stages", args.stages), ("jobs", args.jobs)):
        if v < 1:
            raise ValueError(f"--{what} must be >= 1, got {v}")
    return (_parse_list(args.families, "families", FAMILIES), _parse_list(args.sizes, "sizes", SIZES),
            [int(t) for t in batches])


def cli_main(prog: str, body: Callable[[], int]) -> int:
    """Run a script's body; bad input becomes one line `<prog>: error: ...`, exit 2."""
    try:
        return body()
    except (ValueError, OSError, KeyError) as e:
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        print(f"{prog}: error: {msg}", file=sys.stderr)
        return 2


def per_case_figure(prog: str, args, row_fn: Callable[..., list[dict]], draw, table) -> int:
    """The body shared by per-(model, batch) figures (Figs. 13, 14): plan every
    case, write <prog>.csv, draw, print one table per case."""
    def body() -> int:
        families, sizes, batches = common_inputs(args)
        sources = [load_source(f, args.profile_dir, args.analytic) for f in families]
        tasks = [(src, size, b, args.memory_limit, args.stages, args.reserve)
                 for src in sources for size in sizes for b in batches]
        rows = run_tasks(row_fn, tasks, args.jobs)
        csv_path = write_csv(f"{args.out}/{prog}.csv", rows)
        cases = list(dict.fromkeys((r["model"], r["global_batch"]) for r in rows))
        png = draw(rows, sources, cases, args.out)
        print(source_text(sources))
        for model, batch in cases:
            print("\n".join(table(rows, model, batch)))
        print(f"wrote {png}\nwrote {csv_path}")
        return 0

    return cli_main(prog, body)
