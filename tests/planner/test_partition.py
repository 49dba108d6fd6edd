"""Algorithm 1 (partition adjustment) with whole-unit recompute on stage 0, where
its loop test T_k - C_adj > T_{k+1} holds: (m-1) 4f > (m+p-k-2) 3f for m > 10.
Units are coarse (an MLP unit is a fifth of a 24-layer model's stage), so one move
is kept and the next one overshoots and is undone."""
import models
from planner.partition import adjust_partition, fixed_sets, plan_step
from planner.search import Setting, simulate_config
from tests.planner.synthetic import synthetic_profile

PROF = synthetic_profile(num_layers=24)
P, M = 4, 64
EVEN = tuple(models.even_partition(PROF.num_units, P))
SETTING = Setting(PROF, M, 10 ** 12)  # memory never binds: only time moves units


def test_algorithm_1_moves_units_off_the_adjusted_stage_and_undoes_the_overshoot():
    res = adjust_partition(SETTING, EVEN, 0, None, 0.0, cmb=False, ip=False)
    assert res.moves and all(src == 0 and dst > 0 for src, dst in res.moves)
    assert res.stopped == "balanced" and res.undone is not None and res.undone[0] == 0
    part = res.partition
    assert part[0][1] - part[0][0] == EVEN[0][1] - EVEN[0][0] - len(res.moves)
    before = plan_step(SETTING, EVEN, 0, None, 0.0, False, False)
    after = plan_step(SETTING, part, 0, None, 0.0, False, False)
    assert after.prediction.iteration_time < before.prediction.iteration_time
    assert after.prediction.adjusted_bottleneck  # the undone move was the one that overshot
    overshot = plan_step(SETTING, _apply(part, res.undone), 0, None, 0.0, False, False)
    assert not overshot.prediction.adjusted_bottleneck


def _apply(part, move):
    from planner.costs import move_unit
    return move_unit(part, *move)


def test_adjusted_partition_simulates_faster_than_the_even_one():
    res = adjust_partition(SETTING, EVEN, 0, None, 0.0, cmb=False, ip=False)
    times = []
    for part in (EVEN, res.partition):
        fixed = fixed_sets(SETTING, part, 0, False)
        step = plan_step(SETTING, part, 0, None, 0.0, False, False)
        times.append(simulate_config(SETTING, step.config).makespan)
        assert fixed[1:] == [frozenset()] * (P - 1)
    assert times[1] < times[0]


def test_nothing_to_balance_without_adjusted_or_non_adjusted_stages():
    assert adjust_partition(SETTING, EVEN, -1, None, 0.0).moves == ()
    assert adjust_partition(SETTING, EVEN, P - 1, None, 0.0).stopped == "nothing to balance"
