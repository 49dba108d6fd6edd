"""Plans (obscura-plan/1) and `make_plan`: profile + limit -> plan.

Planning (docs/obscura.md, section 8), all on one profile: (1) even partition; a stage whose
weights alone exceed the limit makes it infeasible; (2) identify adjusted stages
0..k (planner.identify, CMB-Identifying by default; none adjusted: 1F1B); (3)
swapping-aware recompute: swap grid x CP-SAT op choice, best by simulated time
(planner.search), adjusting k+1.. if nothing fits; (4) partition adjustment
(Algorithm 1, planner.partition) when it simulates faster; (5) the baselines
(planner.baselines): one that fits and simulates faster becomes the plan
(PlanResult.source); (6) the schedule family (planner.families): interleaved
(V = 2, 4) and ZB-H1, plain and with steps 3-4's settings; the fastest that fits
wins, recorded as `family`, `virtual_stages` (and, with chunks, `stage_to_device`
and the devices' rows).
If no configuration fits, InfeasibleError names the smallest limit that would.
A plan records what it was made for (planner.plans.plan_meta.PlanSource: model, layers,
seq_len, micro_batch, dtypes, device, profile file and sha256). With a stage mesh
(`layout`: D x T devices a stage) every step runs on one device's profile of it and
the plan records the layout (planner.mesh_plan).
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace
from typing import Mapping

import models
from planner.baselines import evaluate_baselines, minimum_memory
from planner.costs import check_partition, weight_bytes
from planner.families import FAMILIES, search_families
from planner.plans.plan_families import summarize
from planner.errors import InfeasibleError, PlanError
from planner.family_search import FamilyResult
from planner.feasibility import limit_text, round_up_limit
from planner.identify import identify, parse_memory_limit
from planner.layouts.mesh_costs import MeshLayout
from planner.partition import AdjustResult, adjust_partition, fixed_sets
from planner.plans.plan_file import (PLAN_FORMAT, Plan, StagePlan, load_plan, plan_from_json,  # noqa: F401 (re-exported)
                               plan_to_schedule, save_plan)
from planner.plans.plan_meta import PlanSource
from planner.profile import Profile
from planner.recompute.residuals import exact_unit_kept
from planner.search import (Config, Evaluation, Setting, best_obscura, simulate_config, rank, recompute_names,
                            swap_point)
from schedules import issue_order
from schedules.sizes import format_bytes, parse_bytes


TRANSFORMED = ("obscura", "strawman", "obscura-interleaved", "obscura-zb-h1", "obscura-interleaved-zb")


@dataclass(frozen=True)
class PlanResult:
    """A plan and how it was found (for tables, benchmarks and tests)."""
    plan: Plan
    best: Evaluation
    baselines: Mapping[str, Evaluation]
    identified: int                # k from identification
    last_adjusted: int             # k used (identification, or escalated)
    even: Evaluation               # best configuration on the even partition
    adjustment: AdjustResult | None
    seconds: float
    searched: Evaluation | None = None   # the search's best (== best unless a baseline won)
    source: str = "search"               # "search", the baseline that won, or "family:NAME"
    families: Mapping[str, FamilyResult] = field(default_factory=dict)   # every family at its best
    notes: tuple[str, ...] = ()          # what the planner assumed (e.g. a rescaled micro-batch)


def _to_plan(ev: Evaluation, num_microbatches: int, limit: int, baselines: Mapping[str, Evaluation],
             op_order) -> Plan:
    cfg, sched = ev.config, ev.schedule
    transformed = cfg.schedule in TRANSFORMED
    where, one = sched.stage_to_device, sched.one_stage_per_device
    stages = tuple(StagePlan(cfg.partition[s], transformed and s in cfg.adjusted,
                             recompute_names(cfg.recompute[s], op_order), cfg.swap_blocks[s],
                             cfg.beta if cfg.swap_blocks[s] else 0.0, ev.peaks[where[s]],
                             tuple(str(a) for a in sched.stages[s].actions) if one else ())
                   for s in range(len(cfg.partition)))
    base = tuple((name, ev_.makespan if ev_.fits else None) for name, ev_ in baselines.items())
    needs = tuple((name, int(math.ceil(max(ev_.peaks)))) for name, ev_ in baselines.items() if not ev_.fits)
    rows = () if one else tuple(tuple(a.long for a in row) for row in sched.rows)
    # The order its peaks were judged in: `train --plan` issues in it (not in one derived
    # from costs measured in the run, whose noise can reorder and move the inbox peak).
    # A chunked plan issues in its device rows instead.
    order = tuple(a.long for a in issue_order(ev.schedule, ev.costs)) if one else ()
    return Plan(len(stages), num_microbatches, limit, cfg.schedule, stages, ev.makespan, base,
                virtual_stages=cfg.virtual_stages, stage_to_device=() if one else where, device_rows=rows,
                issue_order=order, baseline_needs=needs)


def plan_search(profile: Profile, num_stages: int, num_microbatches: int, memory_limit, *,
                cmb: bool = True, swap: bool = True, partition: bool = True, ip: bool = True,
                exact_residuals: bool = True, reserve=0, profile_path=None, families: bool = True,
                layout: MeshLayout | None = None, family_names=None, weight_grad: str = "hold") -> PlanResult:
    """Everything `make_plan` does, with the intermediate results kept. `families`:
    step 6, every schedule family at its best (off: Obscura on 1F1B and the paper's
    baselines only); `family_names`: only these families (planner.families.FAMILIES
    names), the pick among them. `reserve` (bytes or a size string) is held back from
    the limit for what the model does not count (allocator fragmentation, a CUDA
    context). `profile_path`:
    the file the profile was read from (its name and sha256 go into the plan).
    `weight_grad`: how a split backward's W gets its inputs: "hold" them, or
    "rederive" them from the unit's input (priced by the profile's
    weight_grad_rederive_* fields; the plan records it and `train --plan` runs it).
    `layout`: each stage on a data x tensor mesh (planner.mesh_plan; the profile is
    then one device's at the whole micro-batch, and the limit one device's).
    Long: the checks, then the paper's search, the baselines and every family, in order."""
    start = time.perf_counter()
    made_for = PlanSource.of_profile(profile, profile_path)
    mesh = None
    notes: list[str] = []
    if layout is not None and not layout.single:
        from planner.mesh_plan import plan_mesh, scale_micro_batch  # lazy: only stage meshes need them
        if profile.micro_batch % layout.data:
            rows = math.lcm(profile.micro_batch, layout.data)
            notes.append(f"the profile's micro-batch {profile.micro_batch} does not split over {layout.data} data "
                         f"ranks: planned at micro-batch {rows} ({rows // layout.data} row{'s' if rows > layout.data else ''} "
                         f"a rank), its costs "
                         f"scaled linearly from the profile's (an estimate; measured: obscura profile "
                         f"--micro-batch {rows} ...)")
            profile = scale_micro_batch(profile, rows)
            made_for = PlanSource.of_profile(profile, profile_path)
        mesh = plan_mesh(profile, layout, exact_residuals=exact_residuals)
        profile = mesh.profile
    limit = parse_memory_limit(memory_limit)
    for what, v in (("number of stages", num_stages), ("number of micro-batches", num_microbatches)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise PlanError(f"{what} must be a positive integer, got {v!r}")
    if num_stages > profile.num_units:
        raise PlanError(f"{num_stages} stages need at least as many units; {profile.model} has {profile.num_units}")
    p, m = num_stages, num_microbatches
    held = int(parse_bytes(reserve if reserve is not None else 0, "reserve", allow_zero=True, error=PlanError))
    if held >= limit:
        raise PlanError(f"reserve {format_bytes(held, 2)} leaves nothing of the "
                        f"{format_bytes(limit, 2)} limit")
    usable = limit - held
    even = check_partition(models.even_partition(profile.num_units, p), profile.num_units)
    kept = (mesh.unit_kept if mesh is not None else exact_unit_kept(profile)) if exact_residuals else None
    setting = Setting(profile, m, usable, kept, weight_grad)
    if weight_grad != "hold":
        setting.costs(even, [frozenset()] * p)     # a profile without the fields is refused here
    weights = [weight_bytes(profile, units) for units in even]
    if max(weights) > usable:   # answered before any search (smallest_feasible_limit finds the floor)
        s = max(range(p), key=lambda i: weights[i])
        raise InfeasibleError(
            f"memory limit {format_bytes(limit, 2)} ({limit} bytes) is below stage {s}'s weights alone "
            f"({format_bytes(weights[s] + held, 2)} with the reserve); the smallest feasible limit is above "
            "that (planner.smallest_feasible_limit computes it)")
    paper = obscura_search(setting, even, cmb, swap, partition, ip)
    baselines = evaluate_baselines(setting, even)
    candidates: dict = {}
    if families:
        extra = {"1f1b": {"obscura (paper search)": paper.best}} if paper.best is not None and paper.best.fits else {}
        candidates = search_families(setting, p, swap, family_names, extra, per_op=ip)
    pick, source = _pick(paper, baselines, candidates, family_names)
    if pick is None:
        need = min([paper.need] + [r.needs for r in candidates.values()])
        raise InfeasibleError(
            f"memory limit {format_bytes(limit, 2)} ({limit} bytes) is below what every schedule family needs "
            f"with its leanest recompute and swaps; the smallest feasible limit is {limit_text(need + held)}",
            round_up_limit(need + held))
    plan = replace(_to_plan(pick, m, limit, baselines, profile.op_names), source=made_for, weight_grad=weight_grad,
                   families=summarize(FAMILIES, candidates, profile.op_names,
                                      mesh.synced_time if mesh is not None else None) if families else ())
    if mesh is not None:
        plan = mesh.timed(plan, pick, baselines)
    return PlanResult(plan, pick, baselines, paper.identified, paper.last_adjusted, paper.even or pick,
                      paper.adjustment, time.perf_counter() - start, paper.best, source, candidates, tuple(notes))


def _pick(paper, baselines, families, names=None) -> tuple[Evaluation | None, str]:
    """The fastest fitting of Obscura's own search ("search"), the paper's
    baselines (by name) and every family's best ("family:NAME"); with `names`, of
    those families' only (the paper's search and baselines count as 1f1b's)."""
    options = []
    paper_family = names is None or "1f1b" in names
    if paper_family and paper.best is not None and paper.best.fits:
        options.append((paper.best, "search"))
    options += [(ev, name) for name, ev in baselines.items() if ev.fits and paper_family]
    options += [(r.best.evaluation, f"family:{name}") for name, r in families.items() if r.best is not None]
    if not options:
        return None, "none"
    best = min(options, key=lambda t: rank(t[0]))
    return best


@dataclass(frozen=True)
class PaperSearch:
    """Obscura's own search on 1F1B (the paper's steps 2-4)."""
    best: Evaluation | None          # None: nothing it may choose fits
    even: Evaluation | None          # its best on the even partition
    identified: int
    last_adjusted: int
    adjustment: AdjustResult | None
    need: float                      # the least limit its configuration space needs (inf: unknown)


def obscura_search(setting: Setting, even, cmb: bool, swap: bool, partition: bool, ip: bool) -> PaperSearch:
    """Identify adjusted stages 0..k (CMB-Identifying), then swapping-aware
    recompute (the IP over the swap grid, best by simulated time), escalating k until
    something fits, then partition adjustment (Algorithm 1) when it simulates faster.
    Long: the paper's planning steps in order, each reading the last's result."""
    profile, p = setting.profile, len(even)
    ident = identify(profile, even, setting.num_microbatches, setting.memory_limit, cmb, setting.unit_kept)
    k, best = ident.last_adjusted, None
    if k < 0:
        best = simulate_config(setting, Config("1f1b", even, (), ident.recompute, (0,) * p))
        if not best.fits:  # what waits in an inbox tipped it over: adjust stage 0 onwards
            best, k = None, 0
    if best is None:
        for k in range(max(k, 0), p):
            fixed = fixed_sets(setting, even, k, cmb)
            best = best_obscura(setting, even, k, fixed, swap, ip) if fixed is not None else None
            if best is not None:
                break
    need = math.inf
    if best is None or not best.fits:
        need, floor = minimum_memory(setting, even, cmb, swap)
        if floor is None or not floor.fits:
            return PaperSearch(None, None, ident.last_adjusted, k, None, need)
        best = floor  # the search's grid missed it; the memory floor itself fits
        k = max(best.config.adjusted, default=-1)
    even_best = best
    adjustment = None
    if partition and 0 <= k < p - 1 and best.config.schedule == "obscura":
        lam_k, beta = swap_point(best, k)
        adjustment = adjust_partition(setting, even, k, lam_k, beta, cmb, ip, best.config.order)
        if adjustment.partition != even:
            fixed = fixed_sets(setting, adjustment.partition, k, cmb)
            cand = best_obscura(setting, adjustment.partition, k, fixed, swap, ip) if fixed else None
            if cand is not None and rank(cand) < rank(best):
                best = cand
    return PaperSearch(best, even_best, ident.last_adjusted, k, adjustment, need)


def make_plan(profile: Profile, num_stages: int, num_microbatches: int, memory_limit, cmb: bool = True,
              swap: bool = True, partition: bool = True, ip: bool = True, reserve=0,
              profile_path=None, families: bool = True, layout: MeshLayout | None = None) -> Plan:
    """A plan for `profile` on `num_stages` stages and `num_microbatches`
    micro-batches under `memory_limit` (bytes or e.g. "80GiB"). `cmb`: CMB-Identifying;
    `swap`: swapping-aware recompute's swap grid; `partition`: Algorithm 1; `ip`:
    per-op recompute choice (off: whole-unit recompute on adjusted stages);
    `reserve`: bytes of the limit kept free for what the model does not count;
    `profile_path`: the profile's file, recorded in the plan; `families`: choose the
    schedule family too (planner.families); `layout`: each stage on a data x tensor
    mesh (planner.mesh_plan)."""
    return plan_search(profile, num_stages, num_microbatches, memory_limit, cmb=cmb, swap=swap,
                       partition=partition, ip=ip, reserve=reserve, profile_path=profile_path,
                       families=families, layout=layout).plan
