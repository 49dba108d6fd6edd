"""Obscura planner: profiles, memory/time model, recompute IP, partition adjustment.

    from planner import load_profile, make_plan, load_plan, plan_to_schedule
    plan = make_plan(load_profile("profile.json"), 8, 32, "80GiB")
    schedule = plan_to_schedule(plan)     # what `obscura train --plan` runs

Modules: profile (format), analytic (shape-derived profiles; measured ones come
from obscura_jax.profiling, which runs on devices), costs (profile -> StageCosts), time_model (the paper's Eq. 2-3, 5-6; its
Eq. 1 is the test oracle of the one memory fold, schedules.memory), identify
(adjusted stages, CMB-Identifying), recompute_ip (Eq. 4
with CP-SAT), search (swap grid judged by the simulator), partition
(Algorithm 1), baselines, plan (Plan, obscura-plan/1, make_plan), plan_meta (what
a plan was made for; scaling a plan down onto a smaller model).
Names below load on first use, so `import planner` stays light.
"""
from __future__ import annotations

from models import lazy_attributes

_EXPORTS = {
    "Profile": "planner.profile", "UnitProfile": "planner.profile", "OpProfile": "planner.profile",
    "load_profile": "planner.profile", "save_profile": "planner.profile",
    "profile_from_json": "planner.profile", "derive_profile": "planner.profile",
    "analytic_profile": "planner.analytic",
    "stage_costs": "planner.costs",
    "Plan": "planner.plans.plan_file", "StagePlan": "planner.plans.plan_file", "make_plan": "planner.plan", "smallest_feasible_limit": "planner.feasibility",
    "plan_search": "planner.plan", "load_plan": "planner.plans.plan_file", "save_plan": "planner.plans.plan_file",
    "plan_from_json": "planner.plans.plan_file", "plan_to_schedule": "planner.plans.plan_file",
    "PlanSource": "planner.plans.plan_meta", "scale_partition": "planner.plans.plan_meta",
    "parse_memory_limit": "planner.identify",
    "ProfileError": "planner.errors", "PlanError": "planner.errors", "InfeasibleError": "planner.errors",
}

__all__ = sorted(_EXPORTS)
__getattr__ = lazy_attributes("planner", _EXPORTS)
