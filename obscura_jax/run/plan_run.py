"""Running a plan (`obscura train --plan`): is it this run's model, and if not, may it
run scaled down.

A plan records what it was made for (planner.plans.plan_meta.PlanSource). A run whose
model, layer count, sequence length, micro-batch or dtypes differ is refused with
one line naming what differs, unless the run asks for `plan_scale_down`
(`--plan-scale-down`): then the plan's schedule, per-stage recompute sets and swap
settings run on the run's model with the partition mapped proportionally onto its
units (planner.plans.plan_meta.scale_partition), and the run is labelled "not
comparable": nothing the plan predicts applies to it. This is how a 28B plan is
tried on llama2-tiny.

"Adjusted" means the same in plan and train output: a stage the plan adjusted
(its memory does not fit 1F1B; paper section 3), for a run of a plan; otherwise
a stage whose schedule entry recomputes (schedules.ir.StageSpec.adjusted). A plan's
other stages may still recompute a CMB set in 1F1B order (CMB-Identifying); the
policy column shows it, and each stage's `recomputes` says it.
"""
from __future__ import annotations

from models.registry import format_units
from obscura_jax.errors import UsageError
from planner.errors import ProfileError
from planner.plans.plan_meta import mismatches, scale_partition
from planner.profile import family_of


def _load(path):
    from planner.plan import load_plan  # lazy: planner.plan loads the search (JAX, OR-Tools)
    return load_plan(path)


def plan_differences(run, plan, cfg) -> list[str]:
    """What differs between the plan and this run: its stage mesh (a plan without
    one is for one device a stage), and its source's model and shape (nothing to
    check for an old plan without a source)."""
    out = []
    if plan.layout != run.layout:
        out.append("layout {}x{} vs {}x{} (data x tensor)".format(*plan.layout, *run.layout))
    if plan.source is None:
        return out
    return out + mismatches(plan.source, cfg, run.seq_len, run.micro_batch_size)


def plan_partition(run, plan, cfg) -> tuple[tuple[int, int], ...]:
    """The plan's partition for this run: as planned, or scaled down when the run
    asks for it (else a run of another model is refused)."""
    differ = plan_differences(run, plan, cfg)
    if differ and not run.plan_scale_down:
        raise UsageError(f"plan {run.plan} was made for another run: {', '.join(differ)} (plan vs run); "
                         "--plan-scale-down runs its schedule and recompute choices on this model "
                         "(not comparable)")
    if run.plan_scale_down and plan.source is not None:
        try:
            family = family_of(plan.source.model)
        except ProfileError:
            family = None
        if family is not None and family != cfg.family:
            raise UsageError(f"plan {run.plan} is for a {family} model; its recompute op names do not "
                             f"exist in {cfg.name} ({cfg.family})")
    if run.plan_scale_down and plan.num_units != cfg.num_units:
        return scale_partition(plan.partition, cfg.num_units)
    return plan.partition


def comparable(run, cfg) -> bool | None:
    """Whether the plan's predictions apply to this run: None without a plan or for a
    plan that records no source (nothing to compare), False on another layout."""
    if not run.plan:
        return None
    plan = _load(run.plan)
    if plan.source is None:
        return False if plan.layout != run.layout else None
    return not plan_differences(run, plan, cfg)


def plan_labels(run) -> dict:
    """The plan keys of a run's summary: the plan, its source, whether the run is
    comparable with it, and a note for people ({} without a plan)."""
    if not run.plan:
        return {}
    plan, cfg = _load(run.plan), run.model_config()
    differ = plan_differences(run, plan, cfg)
    note = None
    if plan.source is None:
        note = (f"plan {run.plan} records no model (written before plans did): its model, shape "
                "and dtypes are not checked")
    elif differ:
        units = " -> ".join(" ".join(format_units(r) for r in p) for p in
                            (plan.partition, plan_partition(run, plan, cfg)))
        note = (f"NOT COMPARABLE: plan for {plan.source.describe()} run scaled down on {cfg.name} "
                f"({', '.join(differ)}); partition {units}; its predictions do not apply")
    return {"plan": run.plan, "plan_source": plan.source.to_json() if plan.source else None,
            "plan_comparable": None if plan.source is None else not differ, "plan_note": note}


def plan_issue_order(run, schedule):
    """The issue order a plan's peaks were judged in, as the schedule's Actions, or
    None (no plan, or a plan that does not record one)."""
    if not run.plan:
        return None
    order = _load(run.plan).issue_order
    if not order:
        return None
    by_label = {a.long: a for row in schedule.rows for a in row}
    return [by_label[a] for a in order if a in by_label] if set(order) == set(by_label) else None


def adjusted_stages(run, schedule) -> tuple[int, ...]:
    """The run's adjusted stages (see the module docstring)."""
    if run.plan:
        return _load(run.plan).adjusted_stages
    return schedule.adjusted_stages
