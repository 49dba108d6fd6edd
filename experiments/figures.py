"""The numbers behind the paper-figure scripts (scripts/figures/fig05_*.py .. fig16_*.py):
the profile a figure is simulated from, and the planning runs that become its rows.
Drawing, CSV files and command-line flags are the scripts' (scripts/figures/figlib.py); the
paper's own numbers are experiments.paper's.

Every figure is SIMULATED: the planner (planner.plan.plan_search) judges each
configuration with schedules.simulate on per-unit costs from a profile. The
profile is the measured H200 one (`<profile-dir>/profile_<model>-13b.json`) when
it exists; otherwise an analytic roofline profile (planner.analytic) stands in,
and every label says so loudly. The paper's 18/23/28B models are the 13B shape
with 56/72/88 layers (derive_profile), as in the paper.
"""
from __future__ import annotations

import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import models
from planner.analytic import analytic_profile
from planner.errors import InfeasibleError, PlanError, ProfileError
from planner.identify import parse_memory_limit
from experiments.paper import (ABLATION_RUNS, ABLATION_STEPS, FAMILIES, FIG5_CONFIGS, FIG5_PAPER,
                           MICRO_BATCH, NUM_STAGES, PAPER_LIMIT, PAPER_SPEEDUP, SEQ_LEN, SIZES, SYSTEMS)
from planner.plan import plan_search
from planner.profile import Profile, derive_profile, load_profile
from schedules import Kind, StageCosts, generate, simulate
from schedules.sizes import GiB

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
    warning: str = ""    # what a script prints before using it (empty: nothing)

    def sized(self, size: str) -> Profile:
        """The paper's `size` model: the 13B profile with more layers."""
        if size not in SIZES:
            raise PlanError(f"unknown model size {size!r} (known: {', '.join(SIZES)})")
        return derive_profile(self.profile, SIZES[size], f"{self.family}-{size}")


def load_source(family: str, profile_dir, analytic: str | None = None) -> Source:
    """The measured `<profile_dir>/profile_<family>-13b.json`, or (missing, or
    `analytic` names a device) an analytic roofline profile, with a warning to print.
    A profile that exists but is malformed or of another family is an error."""
    if family not in FAMILIES:
        raise PlanError(f"unknown model family {family!r} (known: {', '.join(FAMILIES)})")
    path = Path(profile_dir) / f"profile_{family}-13b.json"
    if analytic is None and path.exists():
        prof = load_profile(path)
        if not prof.model.startswith(family):
            raise ProfileError(f"profile {path} is of model {prof.model!r}, expected {family}-13b")
        what = "measured" if not prof.device.startswith("analytic") else "analytic (from file)"
        caution = recompute_caution(prof)
        return Source(family, prof, what == "measured",
                      f"{what} {prof.device} profile {path} (seq {prof.seq_len}, mb {prof.micro_batch})", caution,
                      f"WARNING: {family}: {caution}" if caution else "")
    device = analytic or "H200"
    prof = analytic_profile(models.get_config(f"{family}-13b"), SEQ_LEN, MICRO_BATCH, device=device)
    why = "requested" if analytic else f"{path} missing"
    label = f"ANALYTIC {device} roofline profile, NOT measured ({why})"
    return Source(family, prof, False, label, warning=f"WARNING: {family}: figures use an {label}")


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
    (less `reserve`, held back for what the memory model does not count). Without
    `families=True` the paper's systems only: Obscura on 1F1B and its baselines."""
    try:
        return plan_search(profile, num_stages, num_microbatches, memory_limit, reserve=reserve,
                           **{"families": False, **switches})   # the paper's systems: Obscura on 1F1B
    except InfeasibleError:
        return None


def _plan_or_raise(prof: Profile, global_batch: int, limit: int, num_stages: int, reserve):
    result = plan_case(prof, global_batch, limit, num_stages, reserve)
    if result is None:
        raise InfeasibleError(f"{prof.model} at global batch {global_batch} does not fit "
                              f"{limit / GiB:.2f} GiB in any configuration")
    return result


def evaluations(result) -> dict[str, Any]:
    """Every system of a plan search by name: the baselines and 'obscura', the plan
    Obscura's planner hands out on its own (its search's best, or a baseline that
    fits and is faster), whatever family the planner picked with the families on."""
    own = [ev for ev in [result.searched, *result.baselines.values()] if ev is not None and ev.fits]
    best = min(own, key=lambda ev: ev.makespan) if own else (result.searched or result.best)
    return {**result.baselines, "obscura": best}


def family_rows(result, common: dict) -> list[dict]:
    """One row per schedule family (planner.families) of a plan search made with the
    families on: evaluated or not (and why), its fastest fitting time, else what it
    needs, what the search chose (variant, V), and its time with no limit."""
    rows = []
    for f in (result.plan.families if result is not None else ()):
        rows.append({**common, "system": f"family:{f.name}", "label": f.label, "evaluated": f.evaluated,
                     "fits": f.fits, "iteration_s": f.iteration_time,
                     "samples_per_s": common["global_batch"] / f.iteration_time if f.iteration_time else None,
                     "variant": f.variant or "", "virtual_stages": f.virtual_stages,
                     "needs_gib": f.needs_bytes / GiB if f.needs_bytes is not None else None,
                     "max_device_peak_gib": max(f.peak_bytes) / GiB if f.peak_bytes else None,
                     "unlimited_s": f.unlimited_time, "note": f.note})
    return rows


def best_family(result) -> Any:
    """The fastest fitting family summary of a plan search (None: none fits)."""
    fitting = [f for f in (result.plan.families if result is not None else ()) if f.fits]
    return min(fitting, key=lambda f: f.iteration_time) if fitting else None


def throughput_rows(source: Source, size: str, global_batch: int, memory_limit, num_stages: int,
                    reserve=0) -> list[dict]:
    """Fig. 12: one row per system (m = global batch at micro-batch 1); a system
    that does not fit has no iteration time ('OOM'). The ceiling is DAPPLE's
    speedup had it fit: no recompute, memory unlimited."""
    prof = source.sized(size)
    limit = parse_memory_limit(memory_limit)
    result = plan_case(prof, global_batch, limit, num_stages, reserve, families=True)
    evs = evaluations(result) if result is not None else {}
    t_plus, t_layer = (_fitting_time(evs.get(n)) for n in ("dapple_plus", "dapple_plus_layer"))
    t_ceil = evs["dapple"].makespan if "dapple" in evs else None
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
            "num_stages": num_stages, "memory_limit_gib": round(limit / GiB, 3), "system": name,
            "fits": fits, "iteration_s": t, "samples_per_s": samples,
            "tokens_per_s": samples * prof.seq_len * prof.micro_batch if samples else None,
            "speedup_vs_dapple_plus": t_plus / t if t and t_plus else None,
            "ceiling_vs_dapple_plus": t_plus / t_ceil if t_plus and t_ceil else None,
            "speedup_vs_dapple_plus_layer": t_layer / t if t and t_layer else None,
            "ceiling_vs_dapple_plus_layer": t_layer / t_ceil if t_layer and t_ceil else None,
            "paper_speedup_low": paper[0] if name == "obscura" else None,
            "paper_speedup_high": paper[1] if name == "obscura" else None,
            "max_stage_peak_gib": max(ev.peaks) / GiB if ev is not None else None,
            "obscura_schedule": evs["obscura"].config.schedule if evs.get("obscura") else "infeasible",
            "obscura_adjusted": " ".join(map(str, evs["obscura"].config.adjusted)) if evs.get("obscura") else "",
            "order": order_kind(ev) if ev is not None else "",
            "profile": source.label})
    top = best_family(result)
    t = top.iteration_time if top is not None else None
    rows.append({**rows[-1], "system": "best_family", "fits": t is not None, "iteration_s": t,
                 "samples_per_s": global_batch / t if t else None,
                 "tokens_per_s": global_batch / t * prof.seq_len * prof.micro_batch if t else None,
                 "speedup_vs_dapple_plus": t_plus / t if t and t_plus else None,
                 "speedup_vs_dapple_plus_layer": t_layer / t if t and t_layer else None,
                 "paper_speedup_low": None, "paper_speedup_high": None,
                 "max_stage_peak_gib": max(top.peak_bytes) / GiB if top is not None else None,
                 "order": f"{top.label} ({top.variant})" if top is not None else "no family fits"})
    return rows


def _fitting_time(ev) -> float | None:
    return ev.makespan if ev is not None and ev.fits else None


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
                         "units": "%d-%d" % ev.config.partition[s], "weights_gib": w / GiB,
                         "activations_gib": a / GiB, "working_gib": k / GiB, "peak_gib": ev.peaks[s] / GiB,
                         "memory_limit_gib": limit / GiB, "usable_gib": ev.memory_limit / GiB,
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
        raise PlanError(f"unknown ablation run {run!r} (known: {', '.join(ABLATION_RUNS)})")
    labels = dict(ABLATION_STEPS)
    prof = source.sized(size)
    limit = parse_memory_limit(memory_limit)
    result = plan_case(prof, global_batch, limit, num_stages, reserve, **ABLATION_RUNS[run])
    steps = {"relaxation": ("relaxation",), "no_cmb": ("swap_recompute", "partition"), "obscura": ("cmb",)}[run]
    if result is None:
        found = [(key, labels[key], None, "infeasible") for key in steps]
        t_plus = t_layer = None
    else:
        searched = result.searched or result.best
        picks = {"swap_recompute": result.even, "partition": searched, "relaxation": searched, "cmb": searched}
        found = [(key, labels[key], picks[key], result.source) for key in steps]
        if run == "relaxation":
            straw, dapple = result.baselines["strawman"], result.baselines["dapple"]
            found += [("strawman", "Strawman", straw if straw.fits else None, "baseline"),
                      ("ceiling", "DAPPLE, memory unlimited (ceiling)", dapple, "baseline")]
        t_plus = _fitting_time(result.baselines["dapple_plus"])
        t_layer = _fitting_time(result.baselines["dapple_plus_layer"])
    rows = []
    for key, text, ev, plan_source in found:
        t = ev.makespan if ev is not None else None
        rows.append({"model": prof.model, "global_batch": global_batch, "step": key, "label": text,
                     "iteration_s": t, "dapple_plus_s": t_plus,
                     "speedup_vs_dapple_plus": t_plus / t if t and t_plus else None,
                     "dapple_plus_layer_s": t_layer,
                     "speedup_vs_dapple_plus_layer": t_layer / t if t and t_layer else None,
                     "schedule": ev.config.schedule if ev is not None else "",
                     "order": order_kind(ev) if ev is not None else "",
                     "adjusted": " ".join(map(str, ev.config.adjusted)) if ev is not None else "",
                     "partition": " ".join("%d-%d" % u for u in ev.config.partition) if ev is not None else "",
                     "plan_source": plan_source, "memory_limit_gib": limit / GiB, "profile": source.label})
    return rows


def order_kind(ev) -> str:
    """Which F/B order a configuration runs: '1f1b', the generators' own
    'strawman' or 'recomp' order, or 'relaxed' (Obscura's dependency relaxation);
    swap actions are ignored."""
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


def zoo_rows(source: Source, size: str, global_batch: int, memory_limit, num_stages: int,
             reserve=0) -> list[dict]:
    """scripts/figures/fig_zoo.py: from one plan search with the families on, DAPPLE+,
    Obscura's own search on 1F1B, every family at its best (family_rows) and the
    planner's pick; a system that does not fit has no iteration time."""
    prof = source.sized(size)
    limit = parse_memory_limit(memory_limit)
    result = plan_case(prof, global_batch, limit, num_stages, reserve, families=True)
    common = {"family": source.family, "model": prof.model, "global_batch": global_batch, "num_stages": num_stages,
              "memory_limit_gib": round(limit / GiB, 3), "profile": source.label}
    evs = evaluations(result) if result is not None else {}
    plus = evs.get("dapple_plus")
    t_plus = plus.makespan if plus is not None and plus.fits else None
    rows = []
    for name, label in (("dapple_plus", "DAPPLE+ (1F1B, full recompute)"),
                        ("obscura", "Obscura (the paper's search, on 1F1B)")):
        ev = evs.get(name)
        t = ev.makespan if ev is not None and ev.fits else None
        rows.append({**common, "system": name, "label": label, "evaluated": ev is not None, "fits": t is not None,
                     "iteration_s": t, "samples_per_s": global_batch / t if t else None, "variant": "",
                     "virtual_stages": 1, "needs_gib": max(ev.peaks) / GiB if ev is not None and not t else None,
                     "max_device_peak_gib": max(ev.peaks) / GiB if ev is not None else None,
                     "unlimited_s": None, "note": ""})
    rows += family_rows(result, common)
    pick = result.plan if result is not None else None
    rows.append({**common, "system": "pick", "label": "the planner's pick", "evaluated": pick is not None,
                 "fits": pick is not None, "iteration_s": pick.predicted_iteration_time if pick else None,
                 "samples_per_s": global_batch / pick.predicted_iteration_time if pick else None,
                 "variant": result.source if result is not None else "", "virtual_stages":
                     pick.virtual_stages if pick else None, "needs_gib": None, "max_device_peak_gib": None,
                 "unlimited_s": None, "note": pick.schedule if pick else "no family fits"})
    for r in rows:
        r["speedup_vs_dapple_plus"] = t_plus / r["iteration_s"] if r["iteration_s"] and t_plus else None
    return rows


def run_tasks(fn: Callable[..., list[dict]], tasks: Sequence[tuple], jobs: int = 1) -> list[dict]:
    """fn(*task) for every task, concatenated in task order; `jobs` > 1 runs them
    in that many spawned processes (planning is CPU-bound pure Python)."""
    jobs = max(1, min(jobs, len(tasks)))
    if jobs == 1:
        return [row for t in tasks for row in fn(*t)]
    with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn")) as ex:
        parts = list(ex.map(fn, *zip(*tasks)))
    return [row for part in parts for row in part]


@dataclass(frozen=True)
class Fig5Row:
    config: str
    makespan: float
    overhead_pct: float            # makespan vs no recompute (stage 0 finishes last)
    paper_pct: float | None
    stage0_recompute: float        # recompute work on stage 0
    stage0_idle: float             # all idle time of stage 0 (bubbles + start/drain)
    stage0_forward_bubble: float
    stage0_backward_bubble: float
    stage0_peak_inflight: int


def fig05_rows(p: int = 4, m: int = 8, fwd: float = 1.0, bwd: float = 2.0, recompute: float = 1.0):
    """Fig. 5: recompute overhead at stage 0 for the paper's configurations
    (experiments.paper.FIG5_CONFIGS), simulated under uniform costs f, b, r (full
    recompute). Returns (rows, timelines by configuration)."""
    costs = StageCosts.uniform(p, fwd, bwd, recompute)
    timelines, rows = {}, []
    base = None
    for label, name, adjusted in FIG5_CONFIGS:
        tl = simulate(generate(name, p, m, adjusted=adjusted, costs=costs), costs)
        timelines[label] = tl
        base = tl.makespan if base is None else base
        st = tl.stages[0]
        rows.append(Fig5Row(label, tl.makespan, 100.0 * (tl.makespan - base) / base, FIG5_PAPER.get(label),
                            st.recompute, st.idle, st.forward_bubble, st.backward_bubble,
                            st.peak_inflight_microbatches))
    return rows, timelines
