"""The plan file (obscura-plan/1): `Plan` and `StagePlan`, their JSON, and the
schedule a plan runs (`plan_to_schedule`). Making plans: planner.plan."""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Mapping

from models.errors import ObscuraError
from models.registry import get_family
from planner.costs import Partition, check_partition
from planner.errors import PlanError
from planner.names import family_of
from planner.plans.plan_families import FamilySummary, family_from_json
from planner.plans.plan_meta import PlanSource, layout_from_json, source_from_json
from planner.profile import family_of as profile_family_of
from schedules import SCHEDULES, Action, Schedule, ScheduleError, StageSpec, generate, validate
from schedules.deps import dependency_map
from schedules.generators import CHUNKED
from schedules.formats.jsonio import load_document, write_json_atomic

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
    issue_order: tuple[str, ...] = ()     # every action ("2F0") in the order the plan's memory was judged in
    data_parallel: int = 1                # each stage on a data x tensor mesh (planner.mesh_plan);
    tensor_parallel: int = 1              # peaks and the limit are then per device
    families: tuple[FamilySummary, ...] = ()   # every schedule family at its best (planner.plans.plan_families)
    baseline_needs: tuple[tuple[str, int], ...] = ()   # bytes each baseline that does not fit needs
    weight_grad: str = "hold"             # a split backward's W: hold its inputs or rederive them

    def __post_init__(self) -> None:
        if not all(isinstance(a, str) for a in self.issue_order):
            raise PlanError("plan 'issue_order' must be a list of actions like 2F0, 0SO3")
        object.__setattr__(self, "issue_order", tuple(self.issue_order))
        for name in ("num_stages", "num_microbatches", "memory_limit", "data_parallel", "tensor_parallel"):
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
        for s, st in enumerate(stages):
            if st.swap_blocks > self.num_microbatches:
                raise PlanError(f"plan stage {s} swaps {st.swap_blocks} blocks, more than the plan's "
                                f"{self.num_microbatches} micro-batches")
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
        units = source_units(self.source)
        if units is not None and units != stages[-1].units[1]:
            raise PlanError(f"plan stages cover units 0..{stages[-1].units[1] - 1}, but its model "
                            f"{self.source.model} ({self.source.num_layers} layers) has {units} units")
        v = self.virtual_stages
        if isinstance(v, bool) or not isinstance(v, int) or v < 1 or self.num_stages % v:
            raise PlanError(f"plan 'virtual_stages' must divide num_stages={self.num_stages}, got {v!r}")
        if self.weight_grad not in ("hold", "rederive"):
            raise PlanError(f"plan 'weight_grad' must be hold or rederive, got {self.weight_grad!r}")
        object.__setattr__(self, "stage_to_device", tuple(int(d) for d in self.stage_to_device))
        object.__setattr__(self, "device_rows", tuple(tuple(r) for r in self.device_rows))

    @property
    def layout(self) -> tuple[int, int]:
        """(data, tensor) parallelism inside every stage."""
        return self.data_parallel, self.tensor_parallel

    @property
    def num_devices(self) -> int:
        return self.num_stages // self.virtual_stages

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
                **({"layout": {"data": self.data_parallel, "tensor": self.tensor_parallel}}
                   if self.layout != (1, 1) else {}),
                **({"stage_to_device": list(self.stage_to_device), "device_rows": [list(r) for r in self.device_rows]}
                   if self.device_rows else {}),
                **({"issue_order": list(self.issue_order)} if self.issue_order else {}),
                **({"baseline_needs": dict(self.baseline_needs)} if self.baseline_needs else {}),
                **({"weight_grad": self.weight_grad} if self.weight_grad != "hold" else {}),
                **({"families": [f.to_json() for f in self.families]} if self.families else {})}


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
    order = d.get("issue_order", [])
    if not isinstance(order, list):
        raise PlanError("plan 'issue_order' must be a list of actions like 2F0, 0SO3")
    data, tensor = layout_from_json(d)
    families = d.get("families", [])
    needs = d.get("baseline_needs", {})
    if not isinstance(families, list) or not isinstance(needs, dict):
        raise PlanError("plan 'families' must be a list and 'baseline_needs' an object")
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in needs.values()):
        raise PlanError("plan 'baseline_needs' must map baselines to byte counts")
    plan = Plan(d["num_stages"], d["num_microbatches"], d["memory_limit"], d["schedule"], tuple(stages),
                d["predicted_iteration_time"], tuple(d["baselines"].items()), source_from_json(d),
                d.get("virtual_stages", 1), tuple(d.get("stage_to_device", ())), tuple(map(tuple, rows)),
                tuple(order), data, tensor, tuple(family_from_json(f) for f in families),
                tuple(needs.items()), d.get("weight_grad", "hold"))
    if d.get("family", plan.family) != plan.family:
        raise PlanError(f"plan 'family' {str(d['family'])[:40]!r} is not the family of its schedule "
                        f"{plan.schedule!r} ({plan.family})")
    return plan


def source_units(source: PlanSource | None) -> int | None:
    """The unit count of the model a plan was made for (None: no source, or a
    model family not registered here)."""
    if source is None:
        return None
    try:
        kinds = get_family(profile_family_of(source.model)).layer_kinds
    except ObscuraError:
        return None
    return len(kinds) * source.num_layers + 2


def load_plan(path) -> Plan:
    return load_document(path, "plan", plan_from_json)


def save_plan(plan: Plan, path) -> None:
    write_json_atomic(path, plan.to_json())


def plan_to_schedule(plan: Plan) -> Schedule:
    """The plan's Schedule (validated): the stages' recorded orders when the plan
    has them (`obscura plan` writes them: Obscura's order depends on the cost model
    it was generated under), else its generator's default order; each stage's
    recompute set and swap settings from the plan. A recorded order's swap blocks
    must fit its warm-up, and a recorded issue order must be one the engine can
    run (check_issue_order)."""
    sched = _schedule(plan)
    if plan.device_rows or plan.stages[0].actions:
        check_recorded_swaps(plan, sched)
    check_issue_order(plan.issue_order, sched)
    return sched


def check_recorded_swaps(plan: Plan, sched: Schedule) -> None:
    """Each stage swaps out at most its warm-up forwards minus one resident block
    (the generators' rule, for orders they did not generate)."""
    for s, st in enumerate(plan.stages):
        acts = [a for row in sched.rows for a in row if a.stage == s]
        first_bwd = next((i for i, a in enumerate(acts) if a.kind.value in ("B", "I")), len(acts))
        warm = sum(1 for a in acts[:first_bwd] if a.kind.value == "F")
        if st.swap_blocks > max(warm - 1, 0):
            raise PlanError(f"plan stage {s} swaps {st.swap_blocks} blocks; its order runs {warm} warm-up "
                            f"forwards, so at most {max(warm - 1, 0)} (one block stays resident)")


def check_issue_order(order: tuple[str, ...], sched: Schedule) -> None:
    """A recorded issue order: every action of the schedule exactly once, each
    after its device's previous action and everything it waits on (schedules.deps)."""
    if not order:
        return
    acts = {a.long: a for row in sched.rows for a in row}
    pos: dict = {}
    for i, label in enumerate(order):
        a = acts.get(label)
        if a is None:
            raise PlanError(f"plan 'issue_order' item {i} ({str(label)[:20]!r}) is not an action of its schedule")
        if a in pos:
            raise PlanError(f"plan 'issue_order' lists {label} twice")
        pos[a] = i
    if len(pos) != len(acts):
        missing = next(label for label, a in acts.items() if a not in pos)
        raise PlanError(f"plan 'issue_order' leaves out {missing} ({len(pos)} of {len(acts)} actions)")
    deps = dependency_map(sched)
    for row in sched.rows:
        for j, a in enumerate(row):
            late = next((x for x in ([row[j - 1]] if j else []) + list(deps[a]) if pos[x] > pos[a]), None)
            if late is not None:
                raise PlanError(f"plan 'issue_order' issues {a.long} before {late.long}, which it waits on")


def _schedule(plan: Plan) -> Schedule:
    """plan_to_schedule's Schedule, before the checks of recorded orders."""
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
