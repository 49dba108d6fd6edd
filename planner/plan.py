"""Plans (obscura-plan/1) and `make_plan`: profile + limit -> plan.

Planning (spec section 8), all on one profile:
1. even partition (models.even_partition); a stage whose weights alone exceed
   the limit makes the limit infeasible;
2. identify adjusted stages 0..k (planner.identify, CMB-Identifying by default);
   with none adjusted the plan is 1F1B (CMB where needed);
3. swapping-aware recompute: the swap grid x CP-SAT op choice, best by simulated
   time (planner.search); if nothing fits at k, stages k+1.. are adjusted too;
4. partition adjustment (Algorithm 1, planner.partition), kept when it simulates
   faster;
5. the baselines, simulated the same way (planner.baselines); if one that fits
   simulates faster than the searched configuration, the plan is that baseline
   (PlanResult.source says which; with realistic profiles the search wins);
6. the schedule family (planner.families: interleaved V = 2/4, ZB-H1, plain or with
   Obscura on them): the fastest that fits wins; the plan records family and V.
If no configuration fits, InfeasibleError names the smallest limit that would.
A plan records what it was made for (planner.plan_meta.PlanSource: model, layers,
seq_len, micro_batch, dtypes, device, profile file and sha256).
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace
from typing import Any, Mapping

import models
from planner import families as family_choice
from planner.baselines import evaluate_baselines, family_baselines, minimum_memory
from planner.costs import Partition, check_partition, weight_bytes
from planner.errors import InfeasibleError, PlanError
from planner.families import family_of
from planner.identify import identify, parse_memory_limit
from planner.partition import AdjustResult, adjust_partition, fixed_sets
from planner.plan_meta import PlanSource, source_from_json
from planner.profile import Profile
from planner.residuals import exact_unit_kept
from planner.search import (Config, Evaluation, Setting, best_obscura, simulate_config, rank, recompute_names,
                            swap_point)
from schedules import SCHEDULES, Action, Schedule, ScheduleError, StageSpec, generate, validate
from schedules.generators import CHUNKED
from schedules.jsonio import load_document, write_json_atomic
from schedules.sizes import format_bytes

PLAN_FORMAT = "obscura-plan/1"


@dataclass(frozen=True)
class StagePlan:
    units: tuple[int, int]            # half-open range into the 2L+2 units
    adjusted: bool                    # transformed (forwards migrated, recomputes)
    recompute: tuple[str, ...]        # op names, or ("full",)
    swap_blocks: int = 0              # lambda_s
    swap_fraction: float = 0.0        # beta
    predicted_peak_bytes: int = 0
    actions: tuple[str, ...] = ()     # the stage's exact order ("F0", "SO3", ...); () = regenerate

    def __post_init__(self) -> None:
        units = tuple(self.units)
        if len(units) != 2 or not all(isinstance(u, int) and not isinstance(u, bool) for u in units) \
                or not 0 <= units[0] < units[1]:
            raise PlanError(f"stage units must be a non-empty [start, end) pair of integers, got {self.units!r}")
        object.__setattr__(self, "units", units)
        if not isinstance(self.adjusted, bool):
            raise PlanError(f"stage 'adjusted' must be true or false, got {self.adjusted!r}")
        rec = (self.recompute,) if isinstance(self.recompute, str) else tuple(self.recompute)
        if not all(isinstance(r, str) and r for r in rec):
            raise PlanError(f"stage 'recompute' must be a list of op names, got {self.recompute!r}")
        object.__setattr__(self, "recompute", rec)
        if isinstance(self.swap_blocks, bool) or not isinstance(self.swap_blocks, int) or self.swap_blocks < 0:
            raise PlanError(f"stage 'swap_blocks' must be an integer >= 0, got {self.swap_blocks!r}")
        if isinstance(self.swap_fraction, bool) or not isinstance(self.swap_fraction, (int, float)) \
                or not 0.0 <= self.swap_fraction <= 1.0:
            raise PlanError(f"stage 'swap_fraction' must be in [0, 1], got {self.swap_fraction!r}")
        if self.swap_blocks and not self.swap_fraction:
            raise PlanError("a stage with swap_blocks > 0 needs swap_fraction > 0")
        object.__setattr__(self, "swap_fraction", float(self.swap_fraction))
        pk = self.predicted_peak_bytes
        if isinstance(pk, bool) or not isinstance(pk, (int, float)) or not math.isfinite(pk) or pk < 0:
            raise PlanError(f"stage 'predicted_peak_bytes' must be a number >= 0, got {pk!r}")
        object.__setattr__(self, "predicted_peak_bytes", int(math.ceil(pk)))
        acts = tuple(self.actions)
        if not all(isinstance(a, str) for a in acts):
            raise PlanError("stage 'actions' must be a list of action strings like F0, B0, SO3")
        object.__setattr__(self, "actions", acts)


@dataclass(frozen=True)
class Plan:
    num_stages: int
    num_microbatches: int
    memory_limit: int
    schedule: str
    stages: tuple[StagePlan, ...]
    predicted_iteration_time: float
    baselines: tuple[tuple[str, float | None], ...] = ()
    source: PlanSource | None = None      # None: a plan written before plans recorded it
    virtual_stages: int = 1               # model stages (chunks) per device
    stage_to_device: tuple[int, ...] = () # with chunks: where each stage runs
    device_rows: tuple[tuple[str, ...], ...] = ()   # with chunks: each device's order ("2F0", ...)

    def __post_init__(self) -> None:
        for name in ("num_stages", "num_microbatches", "memory_limit"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise PlanError(f"plan '{name}' must be a positive integer, got {v!r}")
        if self.schedule not in SCHEDULES:
            raise PlanError(f"plan schedule {self.schedule!r} is unknown (valid: {', '.join(SCHEDULES)})")
        stages = tuple(self.stages)
        if len(stages) != self.num_stages:
            raise PlanError(f"plan lists {len(stages)} stages for num_stages={self.num_stages}")
        check_partition([st.units for st in stages], stages[-1].units[1])
        object.__setattr__(self, "stages", stages)
        if any(st.actions for st in stages) and not all(st.actions for st in stages):
            raise PlanError("plan gives 'actions' for some stages but not all")
        t = self.predicted_iteration_time
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t) or t < 0:
            raise PlanError(f"plan 'predicted_iteration_time' must be a number >= 0, got {t!r}")
        base = tuple(self.baselines.items()) if isinstance(self.baselines, Mapping) else tuple(self.baselines)
        for name, v in base:
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v)):
                raise PlanError(f"plan baseline {name!r} must be a number or null, got {v!r}")
        object.__setattr__(self, "baselines", base)
        if self.source is not None and not isinstance(self.source, PlanSource):
            raise PlanError(f"plan source must be a PlanSource, got {type(self.source).__name__}")
        v = self.virtual_stages
        if isinstance(v, bool) or not isinstance(v, int) or v < 1 or self.num_stages % v:
            raise PlanError(f"plan 'virtual_stages' must divide num_stages={self.num_stages}, got {v!r}")
        object.__setattr__(self, "stage_to_device", tuple(int(d) for d in self.stage_to_device))
        object.__setattr__(self, "device_rows", tuple(tuple(r) for r in self.device_rows))

    num_devices = property(lambda self: self.num_stages // self.virtual_stages)

    @property
    def family(self) -> str:
        """The base schedule family (planner.families): 1f1b, interleaved, zb-h1, ..."""
        return family_of(self.schedule)

    @property
    def partition(self) -> Partition:
        return tuple(st.units for st in self.stages)

    @property
    def num_units(self) -> int:
        return self.stages[-1].units[1]

    @property
    def adjusted_stages(self) -> tuple[int, ...]:
        return tuple(s for s, st in enumerate(self.stages) if st.adjusted)

    @property
    def recompute_sets(self) -> tuple[tuple[str, ...], ...]:
        """Per stage, what models.resolve_policy(list(r), family) turns into its policy."""
        return tuple(st.recompute for st in self.stages)

    def baseline(self, name: str) -> float | None:
        return dict(self.baselines).get(name)

    def to_json(self) -> dict:
        return {"format": PLAN_FORMAT, **(self.source.to_json() if self.source else {}),
                "num_stages": self.num_stages,
                "num_microbatches": self.num_microbatches, "memory_limit": self.memory_limit,
                "schedule": self.schedule,
                "stages": [{"units": list(st.units), "adjusted": st.adjusted, "recompute": list(st.recompute),
                            "swap_blocks": st.swap_blocks, "swap_fraction": st.swap_fraction,
                            "predicted_peak_bytes": st.predicted_peak_bytes,
                            **({"actions": list(st.actions)} if st.actions else {})}
                           for st in self.stages],
                "predicted_iteration_time": self.predicted_iteration_time,
                "baselines": dict(self.baselines), "family": self.family, "virtual_stages": self.virtual_stages,
                **({"stage_to_device": list(self.stage_to_device), "device_rows": [list(r) for r in self.device_rows]}
                   if self.device_rows else {})}


_PLAN_KEYS = ("num_stages", "num_microbatches", "memory_limit", "schedule", "stages",
              "predicted_iteration_time", "baselines")
_STAGE_KEYS = ("units", "adjusted", "recompute", "swap_blocks", "swap_fraction", "predicted_peak_bytes")


def plan_from_json(d: Any) -> Plan:
    if not isinstance(d, dict):
        raise PlanError(f"a plan must be a JSON object, got {type(d).__name__}")
    if d.get("format") != PLAN_FORMAT:
        raise PlanError(f"not an {PLAN_FORMAT} file (format is {d.get('format')!r})")
    for key in _PLAN_KEYS:
        if key not in d:
            raise PlanError(f"plan is missing key {key!r}")
    if not isinstance(d["stages"], list) or not d["stages"]:
        raise PlanError("plan 'stages' must be a non-empty list")
    if not isinstance(d["baselines"], dict):
        raise PlanError("plan 'baselines' must be an object")
    stages = []
    for s, st in enumerate(d["stages"]):
        if not isinstance(st, dict):
            raise PlanError(f"plan stage {s} must be an object")
        for key in _STAGE_KEYS:
            if key not in st:
                raise PlanError(f"plan stage {s} is missing key {key!r}")
        if not isinstance(st["units"], list) or not isinstance(st["recompute"], list) \
                or not isinstance(st.get("actions", []), list):
            raise PlanError(f"plan stage {s}: 'units', 'recompute' and 'actions' must be lists")
        try:
            stages.append(StagePlan(tuple(st["units"]), st["adjusted"], tuple(st["recompute"]),
                                    st["swap_blocks"], st["swap_fraction"], st["predicted_peak_bytes"],
                                    tuple(st.get("actions", ()))))
        except PlanError as e:
            raise PlanError(f"plan stage {s}: {e}") from None
    rows = d.get("device_rows", [])
    if not isinstance(rows, list) or not all(isinstance(r, list) for r in rows) \
            or not isinstance(d.get("stage_to_device", []), list):
        raise PlanError("plan 'device_rows' must be a list of lists and 'stage_to_device' a list")
    return Plan(d["num_stages"], d["num_microbatches"], d["memory_limit"], d["schedule"], tuple(stages),
                d["predicted_iteration_time"], tuple(d["baselines"].items()), source_from_json(d),
                d.get("virtual_stages", 1), tuple(d.get("stage_to_device", ())), tuple(map(tuple, rows)))


def load_plan(path) -> Plan:
    return load_document(path, "plan", plan_from_json)


def save_plan(plan: Plan, path) -> None:
    write_json_atomic(path, plan.to_json())


def plan_to_schedule(plan: Plan) -> Schedule:
    """The plan's Schedule (validated): the stages' recorded orders when the plan
    has them (`obscura plan` writes them: Obscura's order depends on the cost model
    it was generated under), else its generator's default order; each stage's
    recompute set and swap settings from the plan."""
    if plan.device_rows:   # several stages per device: the devices' recorded rows
        specs = tuple(StageSpec((), st.recompute, st.swap_fraction if st.swap_blocks else 0.0, st.swap_blocks)
                      for st in plan.stages)
        rows = tuple(tuple(Action.parse(a) for a in row) for row in plan.device_rows)
        try:
            sched = Schedule(plan.schedule, plan.num_stages, plan.num_microbatches, specs, plan.stage_to_device,
                             rows)
        except ScheduleError as e:
            raise PlanError(f"plan rows: {e}") from None
        validate(sched)
        return sched
    if plan.stages[0].actions:
        specs = []
        for s, st in enumerate(plan.stages):
            acts = tuple(Action.parse(a, s) for a in st.actions)
            specs.append(StageSpec(acts, st.recompute, st.swap_fraction if st.swap_blocks else 0.0,
                                   st.swap_blocks))
        sched = Schedule(plan.schedule, plan.num_stages, plan.num_microbatches, tuple(specs))
        validate(sched)
        return sched
    lam = tuple(st.swap_blocks for st in plan.stages)
    beta = max((st.swap_fraction for st in plan.stages if st.swap_blocks), default=0.0)
    adjusted = plan.adjusted_stages
    if plan.schedule in ("recomp", "strawman", "obscura") and not adjusted:
        raise PlanError(f"a {plan.schedule!r} plan needs at least one adjusted stage")
    sched = generate(plan.schedule, plan.num_stages // plan.virtual_stages, plan.num_microbatches,
                     adjusted=adjusted or None, recompute=("full",),
                     swap_blocks=lam if any(lam) else 0, swap_fraction=beta,
                     **({"virtual_stages": plan.virtual_stages} if plan.schedule in CHUNKED else {}))
    stages = tuple(replace(spec, recompute=st.recompute, swap_fraction=st.swap_fraction if st.swap_blocks else 0.0)
                   for spec, st in zip(sched.stages, plan.stages))
    return replace(sched, stages=stages)


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
    source: str = "search"               # "search", the baseline or family candidate that won
    families: Mapping[str, Evaluation] = field(default_factory=dict)   # planner.families' candidates


def _to_plan(ev: Evaluation, num_microbatches: int, limit: int, baselines: Mapping[str, Evaluation],
             op_order) -> Plan:
    cfg, sched = ev.config, ev.schedule
    transformed = cfg.schedule in ("obscura", "strawman", "obscura-interleaved", "obscura-zb-h1")
    where, one = sched.stage_to_device, sched.one_stage_per_device
    stages = tuple(StagePlan(cfg.partition[s], transformed and s in cfg.adjusted,
                             recompute_names(cfg.recompute[s], op_order), cfg.swap_blocks[s],
                             cfg.beta if cfg.swap_blocks[s] else 0.0, ev.peaks[where[s]],
                             tuple(str(a) for a in sched.stages[s].actions) if one else ())
                   for s in range(len(cfg.partition)))
    base = tuple((name, ev_.makespan if ev_.fits else None) for name, ev_ in baselines.items())
    rows = () if one else tuple(tuple(a.long for a in row) for row in sched.rows)
    return Plan(len(stages), num_microbatches, limit, cfg.schedule, stages, ev.makespan, base,
                virtual_stages=cfg.virtual_stages, stage_to_device=() if one else where, device_rows=rows)


def plan_search(profile: Profile, num_stages: int, num_microbatches: int, memory_limit, *,
                cmb: bool = True, swap: bool = True, partition: bool = True, ip: bool = True,
                exact_residuals: bool = True, reserve=0, profile_path=None, families: bool = True) -> PlanResult:
    """Everything `make_plan` does, with the intermediate results kept. `families`:
    step 6 (off: Obscura on 1F1B and the paper's baselines only). `reserve`
    (bytes or a size string) is held back from the limit for what the model does
    not count (XLA scratch buffers, allocator fragmentation). `profile_path`: the
    file the profile was read from (its name and sha256 go into the plan).
    Long: the five planning steps in order, each reading the last's result."""
    start = time.perf_counter()
    limit = parse_memory_limit(memory_limit)
    for what, v in (("number of stages", num_stages), ("number of micro-batches", num_microbatches)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise PlanError(f"{what} must be a positive integer, got {v!r}")
    if num_stages > profile.num_units:
        raise PlanError(f"{num_stages} stages need at least as many units; {profile.model} has {profile.num_units}")
    p, m = num_stages, num_microbatches
    held = parse_memory_limit(reserve) if reserve not in (0, None, "0") else 0
    if held >= limit:
        raise PlanError(f"reserve {format_bytes(held, 2)} leaves nothing of the "
                        f"{format_bytes(limit, 2)} limit")
    usable = limit - held
    even = check_partition(models.even_partition(profile.num_units, p), profile.num_units)
    setting = Setting(profile, m, usable, exact_unit_kept(profile) if exact_residuals else None)

    weights = [weight_bytes(profile, units) for units in even]
    if max(weights) > usable:
        s = max(range(p), key=lambda i: weights[i])
        need, _ = minimum_memory(setting, even, cmb, swap)
        raise InfeasibleError(
            f"memory limit {format_bytes(limit, 2)} ({limit} bytes) is below stage {s}'s weights "
            f"{format_bytes(weights[s], 2)}; the smallest feasible limit is {_limit_text(need + held)}",
            _round_up(need + held))

    ident = identify(profile, even, m, usable, cmb, setting.unit_kept)
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
    if best is None or not best.fits:
        need, floor = minimum_memory(setting, even, cmb, swap)
        if floor is None or not floor.fits:
            what = "whole-unit recompute" + (" and the most swapping" if swap else "")
            raise InfeasibleError(
                f"memory limit {format_bytes(limit, 2)} ({limit} bytes) is below what {what} needs; "
                f"the smallest feasible limit is {_limit_text(need + held)}", _round_up(need + held))
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
    baselines = {**evaluate_baselines(setting, even), **(family_baselines(setting, even) if families else {})}
    searched, source = best, "search"
    for name, ev in baselines.items():  # never hand out a plan slower than a baseline that fits
        if ev.fits and rank(ev) < rank(best):
            best, source = ev, name
    candidates: dict = {}
    if families:
        best, family_source, candidates = family_choice.choose(setting, even, best, searched)
        source = family_source or source
    plan = replace(_to_plan(best, m, limit, baselines, profile.op_names),
                   source=PlanSource.of_profile(profile, profile_path))
    return PlanResult(plan, best, baselines, ident.last_adjusted, k, even_best, adjustment,
                      time.perf_counter() - start, searched, source, candidates)


def make_plan(profile: Profile, num_stages: int, num_microbatches: int, memory_limit, cmb: bool = True,
              swap: bool = True, partition: bool = True, ip: bool = True, reserve=0,
              profile_path=None, families: bool = True) -> Plan:
    """A plan for `profile` on `num_stages` stages and `num_microbatches`
    micro-batches under `memory_limit` (bytes or e.g. "80GiB"). `cmb`: CMB-Identifying;
    `swap`: swapping-aware recompute's swap grid; `partition`: Algorithm 1; `ip`:
    per-op recompute choice (off: whole-unit recompute on adjusted stages);
    `reserve`: bytes of the limit kept free for what the model does not count;
    `profile_path`: the profile's file, recorded in the plan; `families`: choose the
    schedule family too (planner.families)."""
    return plan_search(profile, num_stages, num_microbatches, memory_limit, cmb=cmb, swap=swap,
                       partition=partition, ip=ip, reserve=reserve, profile_path=profile_path,
                       families=families).plan


def _round_up(need: float) -> int:
    """The smallest feasible limit as a whole number of bytes, a hair above the
    floor so the integer program's conservative rounding accepts it."""
    return int(math.ceil(need * (1 + 1e-9))) + 4096


def _limit_text(need: float) -> str:
    b = _round_up(need)
    return f"{format_bytes(b, 2)} ({b} bytes)"
