"""A plan's schedule and costs, as the planner simulated them, for `simulate` and your own code.

    from planner import load_plan, load_profile, planned_run
    run = planned_run(load_plan("plan.json"), load_profile("profile.json"))
    run.schedule, run.costs          # schedules.Schedule, schedules.StageCosts
    schedules.simulate(run.schedule, run.costs).makespan == plan.predicted_iteration_time

The schedule is the plan's own (planner.plans.plan_file.plan_to_schedule: its recorded
order, recompute sets and swaps); the costs are planner.costs.stage_costs over its
partition and recompute sets, with the traced kept bytes where the profile's model
is registered (as the search priced it). `obscura plan --schedule-json S --costs-json
C` writes both, and `obscura simulate --from-schedule S --costs C` gives the plan's
simulated iteration; a torch CSV (`--torch-csv`) carries the order alone, so with it
`simulate --from-torch-csv T --costs C --adjusted STAGES` marks which stages
recompute (`recomputing_stages`), and swaps are not in it.
"""
from __future__ import annotations

from dataclasses import dataclass

from planner.costs import stage_costs
from planner.plans.plan_file import Plan, plan_to_schedule
from planner.profile import Profile
from schedules import Schedule, StageCosts


@dataclass(frozen=True)
class PlannedRun:
    schedule: Schedule
    costs: StageCosts


def planned_run(plan: Plan, profile: Profile, exact_residuals: bool = True) -> PlannedRun:
    """The schedule and StageCosts `plan` was judged with, for `profile` (the one it
    was made from, `--layers` applied as when planning)."""
    from planner.recompute.residuals import exact_unit_kept  # lazy: traces the model's residuals (JAX)
    kept = exact_unit_kept(profile) if exact_residuals else None
    sets = [frozenset(st.recompute) for st in plan.stages]
    return PlannedRun(plan_to_schedule(plan), stage_costs(profile, plan.partition, sets, unit_kept=kept))


def recomputing_stages(plan: Plan) -> tuple[int, ...]:
    """The stages that recompute something (what a torch CSV cannot say)."""
    return tuple(s for s, st in enumerate(plan.stages) if st.recompute)
