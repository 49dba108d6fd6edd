"""Obscura on interleaved 1F1B and ZB-H1 (the capped one, see obscura_on.py): never
slower, never fuller than the base with Recomp-K; migration; explicit caps."""
import pytest

from schedules import Kind, ScheduleError, StageCosts, generate, simulate
from schedules.generators.obscura_on import held_peaks, migration_bounds
from schedules.formats.text import timeline_ascii
from schedules.zoo_grid import OBSCURA_ON, device_costs


@pytest.mark.parametrize("base", ["interleaved", "zb-h1-capped", "interleaved-zb"])
@pytest.mark.parametrize("p,m,k,r", [(4, 8, 0, 1.0), (4, 16, 1, 0.4), (4, 8, 2, 0.4), (8, 16, 0, 1.0)])
def test_never_slower_never_fuller_than_recomp_k(base, p, m, k, r):
    costs = device_costs(base, p, r)
    rk = simulate(generate(base, p, m, adjusted=k), costs)
    ob = simulate(generate(OBSCURA_ON[base], p, m, adjusted=k, costs=costs), costs)
    assert ob.makespan <= rk.makespan * (1 + 1e-9)
    for a, b in zip(ob.stages, rk.stages):
        assert a.peak_inflight_microbatches <= b.peak_inflight_microbatches


def test_migration_holds_more_and_hides_recompute():
    costs = device_costs("zb-h1-capped", 4, 1.0)
    rk = simulate(generate("zb-h1-capped", 4, 8, adjusted=1), costs)
    ob = simulate(generate("obscura-zb-h1", 4, 8, adjusted=1, costs=costs), costs)
    mig = simulate(generate("obscura-zb-h1", 4, 8, adjusted=1, costs=costs, migrate=True), costs)
    assert (rk.makespan, ob.makespan, mig.makespan) == (37, 37, 35)
    assert [st.peak_inflight_microbatches for st in mig.stages] == [5, 5, 2, 1]
    s = generate("zb-h1-capped", 4, 8, adjusted=1)
    assert held_peaks(s) == (4, 3, 2, 1) and migration_bounds(s, True) == (8, 3 + 4, 2 + 2, 1)   # at most m


def test_interleaved_relaxation_gains_where_bubbles_are_left():
    costs = device_costs("interleaved", 8, 0.4)
    rk = simulate(generate("interleaved", 8, 32, adjusted=1), costs)
    ob = simulate(generate("obscura-interleaved", 8, 32, adjusted=1, costs=costs), costs)
    assert ob.makespan < rk.makespan - 1.0


def test_explicit_caps_and_deadlocking_caps():
    costs = device_costs("zb-h1-capped", 4, 1.0)
    s = generate("obscura-zb-h1", 4, 8, adjusted=1, costs=costs, warmup=(5, 5, 2, 1))
    assert simulate(s, costs).makespan == 35
    with pytest.raises(ScheduleError, match="deadlock"):
        generate("obscura-zb-h1", 4, 8, adjusted=1, costs=costs, warmup=(1, 1, 1, 1))
    with pytest.raises(ScheduleError, match="warmup must hold 4 integers"):
        generate("obscura-zb-h1", 4, 8, adjusted=1, costs=costs, warmup=(5, 5))
    with pytest.raises(ScheduleError, match="costs describe 4 stages"):
        generate("obscura-interleaved", 4, 8, adjusted=1, costs=costs)


def test_unadjusted_is_the_base_and_swaps_follow_the_relaxed_rows():
    assert generate("obscura-zb-h1", 4, 8, adjusted="none").rows == generate("zb-h1-capped", 4, 8).rows
    s = generate("obscura-interleaved", 4, 8, adjusted=1, swap_blocks=2, swap_fraction=1.0)
    assert s.name == "obscura-interleaved" and any(a.kind == Kind.SI for a in s.rows[0])
    assert s.stages[0].swap_fraction == 1.0


def test_docstring_picture_is_current():
    import schedules.generators.obscura_on as mod
    costs = StageCosts.uniform(4, 1.0, 2.0, 1.0)
    tl = simulate(generate("obscura-zb-h1", 4, 8, adjusted=1, costs=costs, migrate=True), costs)
    assert "\n".join("    " + ln for ln in timeline_ascii(tl).splitlines()) in mod.__doc__
