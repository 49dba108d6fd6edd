"""The paper's time model in closed form (planner.time_model) against the simulator,
the judge: exact where both must agree, and wrong only in the direction its
docstring states elsewhere. (Swapped schedules: tests/planner/test_memory_model.py.)"""
import random

import pytest

from planner.time_model import finish_times, predict_closed_form, step_costs, swap_hides, swap_stall
from schedules import StageCosts, generate, simulate

GRID = [(p, m) for p in (2, 4, 8) for m in (p, 2 * p, 4 * p)]


def uniform(p, **kw):
    return StageCosts.uniform(p, fwd=1.0, bwd=2.0, recompute=1.0, act_bytes=40, act_bytes_recompute=20,
                              weight_bytes=100, **kw)


def uneven(rng, p):
    f = [rng.uniform(0.5, 1.5) for _ in range(p)]
    return StageCosts(fwd=tuple(f), bwd=tuple(x * 2 * rng.uniform(0.8, 1.2) for x in f),
                      recompute=tuple(x * rng.uniform(0.2, 1.0) for x in f))


@pytest.mark.parametrize("p, m", GRID)
def test_eq3_equals_simulated_makespan_without_swapping(p, m):
    c = uniform(p)
    assert predict_closed_form(c, m, -1).iteration_time == simulate(generate("1f1b", p, m), c).makespan
    assert predict_closed_form(c, m, p - 1).iteration_time == simulate(
        generate("recomp", p, m, adjusted="all"), c).makespan
    for k in range(p):
        sim = simulate(generate("obscura", p, m, adjusted=k, costs=c), c).makespan
        assert predict_closed_form(c, m, k).iteration_time == pytest.approx(sim)


def test_finish_times_match_the_closed_form():
    # s > k: T_s = 3mf + 3(p-s-1)f with f = 1
    t = finish_times(8, 16, 2, 4.0, 3.0)
    assert t[3:] == tuple(3.0 * (16 + 8 - s - 1) for s in range(3, 8))
    assert t[2] == max(t[3] + 4.0, 4.0 * 16)


@pytest.mark.parametrize("p, m", GRID)
@pytest.mark.parametrize("latency", [0.05, 0.5])
def test_optimistic_when_stages_communicate(p, m, latency):
    """No transfers in the closed form: with p2p latency it never predicts more."""
    c = uniform(p, p2p_latency=latency)
    assert predict_closed_form(c, m, -1).iteration_time < simulate(generate("1f1b", p, m), c).makespan
    for k in range(p):
        sim = simulate(generate("obscura", p, m, adjusted=k, costs=c), c).makespan
        assert predict_closed_form(c, m, k).iteration_time <= sim + 1e-9


def test_pessimistic_on_uneven_stages_for_1f1b_and_recomp():
    """One bottleneck step for every stage: never below the simulation of 1F1B or
    Recomp-All when stage costs differ."""
    rng = random.Random(0)
    for _ in range(60):
        p = rng.choice([2, 3, 4, 6, 8])
        m = rng.choice([p, 2 * p, 4 * p])
        c = uneven(rng, p)
        assert predict_closed_form(c, m, -1).iteration_time >= simulate(generate("1f1b", p, m), c).makespan - 1e-9
        assert predict_closed_form(c, m, p - 1).iteration_time >= simulate(
            generate("recomp", p, m, adjusted="all"), c).makespan - 1e-9


def test_step_costs_and_swap_terms():
    c = StageCosts(fwd=(1.0, 2.0, 1.0), bwd=(2.0, 4.0, 2.0), recompute=(1.0, 0.5, 1.0))
    assert step_costs(c, 0) == (4.0, 6.0)                 # stage 0 recomputes; stage 1 is the slowest rest
    assert step_costs(c, 1, recompute_stages=(1,)) == (6.5, 3.0)
    # a block that hides under a forward and a backward costs nothing
    assert swap_stall(2, kept=10.0, beta=0.5, host_bandwidth=10.0, fwd=1.0, bwd=2.0, recompute=1.0, k=0, s=0) == 0.0
    # eviction 2 * (5 - 1) = 8, loading 2 * (5 - 3) = 4
    assert swap_stall(2, kept=50.0, beta=1.0, host_bandwidth=10.0, fwd=1.0, bwd=2.0, recompute=1.0, k=0, s=0) == 12.0
    assert swap_hides(40.0, 1.0, 10.0, 1.0, 2.0, 1.0) and not swap_hides(41.0, 1.0, 10.0, 1.0, 2.0, 1.0)
