"""Plan invariants over a grid of limits and micro-batch counts (synthetic profile)."""
import json
from functools import lru_cache

import pytest

from planner.baselines import minimum_memory
from planner.costs import stage_costs
from planner.errors import InfeasibleError, PlanError
from planner.identify import stage_peak_1f1b
from planner.plan import (load_plan, make_plan, plan_from_json, plan_search, plan_to_schedule,
                          save_plan)
from planner.search import Setting
from schedules import simulate, validate
from tests.planner.synthetic import MB, synthetic_profile

import models

P = 4
PROF = synthetic_profile(num_layers=8)
EVEN = tuple(models.even_partition(PROF.num_units, P))


@lru_cache(maxsize=None)
def floor_limit(m: int) -> float:
    return minimum_memory(Setting(PROF, m, float("inf")), EVEN)[0]


def one_f_one_b_limit(m: int) -> float:
    return max(stage_peak_1f1b(PROF, r, s, P, m, frozenset()) for s, r in enumerate(EVEN))


def check(plan, m, limit):
    assert plan.num_devices == P and plan.num_microbatches == m and plan.memory_limit == int(limit)
    assert all(st.predicted_peak_bytes <= limit for st in plan.stages)
    # the plan's schedule is valid and simulates to the predicted time
    sched = plan_to_schedule(plan)
    validate(sched)
    costs = stage_costs(PROF, plan.partition, [frozenset(st.recompute) for st in plan.stages])
    assert simulate(sched, costs).makespan == pytest.approx(plan.predicted_iteration_time)
    # adjusted stages are a prefix and every baseline that runs is no faster
    adj = tuple(sorted({s % P for s in plan.adjusted_stages}))   # adjusted devices
    assert adj == tuple(range(len(adj)))
    for name, t in plan.baselines:
        assert t is None or plan.predicted_iteration_time <= t * (1 + 1e-9), name
    again = plan_from_json(json.loads(json.dumps(plan.to_json())))
    assert again == plan


@pytest.mark.parametrize("m", [4, 8, 16])
@pytest.mark.parametrize("frac", [0.0, 0.35, 0.7])
def test_every_predicted_peak_fits(m, frac):
    lo, hi = floor_limit(m) * 1.001, one_f_one_b_limit(m)
    limit = int(lo + frac * (hi - lo))
    res = plan_search(PROF, P, m, limit)
    check(res.plan, m, limit)
    if frac < 0.5:   # memory is short: something is recomputed or swapped
        assert any(st.recompute or st.swap_blocks for st in res.plan.stages)
    assert res.plan.baseline("dapple") is None  # 1F1B does not fit below its limit


@pytest.mark.parametrize("m", [4, 16])
def test_a_limit_that_fits_1f1b_adjusts_nothing(m):
    limit = int(one_f_one_b_limit(m) * 1.05) + 4 * MB
    plan = make_plan(PROF, P, m, limit, families=False)
    check(plan, m, limit)
    assert plan.schedule == "1f1b" and not plan.adjusted_stages
    assert all(st.recompute == () and st.swap_blocks == 0 for st in plan.stages)
    assert plan.baseline("dapple") == pytest.approx(plan.predicted_iteration_time)


@pytest.mark.parametrize("m", [4, 16])
def test_infeasible_limit_names_the_smallest_feasible_one(m):
    limit = int(floor_limit(m) * 0.98)
    with pytest.raises(InfeasibleError) as e:
        make_plan(PROF, P, m, limit)
    msg = str(e.value)
    assert "\n" not in msg and "smallest feasible limit" in msg
    smallest = e.value.smallest_feasible_limit
    assert smallest > limit and str(smallest) in msg
    check(make_plan(PROF, P, m, smallest), m, smallest)


def test_below_the_weights():
    with pytest.raises(InfeasibleError, match=r"below stage \d's weights .* smallest feasible limit"):
        make_plan(PROF, P, 8, "60MiB")


def test_ablation_flags_narrow_the_search():
    m, limit = 8, int(floor_limit(8) * 1.2)
    full = plan_search(PROF, P, m, limit)
    relax = plan_search(PROF, P, m, limit, swap=False, partition=False, ip=False)
    assert all(st.swap_blocks == 0 for st in relax.plan.stages)
    assert all(st.recompute in ((), ("full",), ("layer",)) for st in relax.plan.stages)
    assert full.searched.makespan <= relax.searched.makespan * (1 + 1e-9)
    with pytest.raises(PlanError, match="positive integer"):
        make_plan(PROF, 0, m, limit)
