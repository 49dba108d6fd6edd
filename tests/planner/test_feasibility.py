"""planner.feasibility: the floor is feasible and a hair below it is not."""
import pytest

from planner import make_plan, smallest_feasible_limit
from planner.errors import InfeasibleError
from planner.feasibility import limit_text, round_up_limit
from tests.planner.synthetic import synthetic_profile


def test_round_up_limit_is_above_the_need_and_limit_text_names_bytes():
    assert round_up_limit(1000.0) > 1000
    assert f"({round_up_limit(2.5e9)} bytes)" in limit_text(2.5e9)


def test_the_floor_plans_and_below_it_is_refused():
    prof = synthetic_profile(num_layers=8)
    floor = smallest_feasible_limit(prof, 4, 8)
    assert max(s.predicted_peak_bytes for s in make_plan(prof, 4, 8, floor).stages) <= floor
    with pytest.raises(InfeasibleError, match="smallest feasible limit"):
        make_plan(prof, 4, 8, int(floor * 0.98))
