"""planner.recompute.recompute_options: a stage's efficient recompute choices, priced as the
planner prices them."""
import pytest

from planner.costs import kept_bytes, recompute_time, working_bytes
from planner.profile import FULL, LAYER
from planner.recompute.recompute_options import Option, pareto, stage_options
from tests.planner.synthetic import synthetic_profile


@pytest.mark.parametrize("units", [(0, 5), (3, 9), (13, 18)])
def test_options_are_an_efficient_front_priced_like_the_planner(units):
    prof = synthetic_profile(num_layers=8)
    opts = stage_options(prof, units, traced=False)
    assert opts[0].recompute == frozenset() and opts[0].time == 0.0
    assert [o.time for o in opts] == sorted(o.time for o in opts)
    for o in opts:   # nothing beats or equals an option everywhere
        assert not any(p is not o and p.time <= o.time and p.kept <= o.kept and p.work <= o.work for p in opts)
        assert o.kept == pytest.approx(kept_bytes(prof, units, o.recompute))
        assert o.time == pytest.approx(recompute_time(prof, units, o.recompute))
        assert o.work == pytest.approx(working_bytes(prof, units, o.recompute))
    names = {frozenset({FULL}), frozenset({LAYER})}
    assert names & {o.recompute for o in opts}        # a preset is on the front (the leanest)
    assert min(o.kept for o in opts) == pytest.approx(min(kept_bytes(prof, units, r) for r in names))


def test_pareto_keeps_the_first_of_equals():
    a, b, c = Option(frozenset(), 0, 10, 0), Option(frozenset({"x"}), 0, 10, 0), Option(frozenset({"y"}), 1, 5, 0)
    assert pareto([b, a, c]) == [b, c]
