"""Looped BFS (torch's ScheduleLoopedBFS order): backwards in reverse micro-batch
order, which the validator accepts since it only asks what the dependency rule
asks; torch's own output is matched in test_torch_goldens.py."""
import importlib

import pytest

from schedules import Kind, StageCosts, generate, simulate
from schedules.generators import model_stages
from schedules.formats.text import timeline_ascii


def test_acceptance_p4_m8_v2_is_57():
    s = generate("looped-bfs", 4, 8, virtual_stages=2)
    assert model_stages("looped-bfs", 4, 2) == s.num_stages == 8
    assert simulate(s, StageCosts.uniform(8, 1.0, 2.0, 0.0)).makespan == pytest.approx(57)


def test_order_breadth_first_and_backwards_in_reverse():
    row = generate("looped-bfs", 2, 3, virtual_stages=2).rows[1]
    assert [a.long for a in row] == ["1F0", "1F1", "1F2", "3F0", "3F1", "3F2",
                                     "3B2", "3B1", "3B0", "1B2", "1B1", "1B0"]


@pytest.mark.parametrize("p,m,v", [(2, 4, 2), (4, 8, 2), (8, 16, 2), (4, 8, 3), (4, 5, 1)])
def test_makespan_is_the_forward_and_backward_fill_drain(p, m, v):
    """Each device runs all mV forwards then all mV backwards; the first backward
    waits for the trip down to the last chunk and back: (mV + p - 1)(f + b)."""
    tl = simulate(generate("looped-bfs", p, m, virtual_stages=v), StageCosts.uniform(p * v, 1.0, 2.0, 0.0))
    assert tl.makespan == pytest.approx((m * v + p - 1) * 3)
    assert all(st.peak_inflight_microbatches == m * v for st in tl.stages)   # GPipe's memory


def test_recompute_and_swaps_apply():
    s = generate("looped-bfs", 4, 8, adjusted=1, swap_blocks=1, swap_fraction=0.5)
    assert s.adjusted_stages == (0, 1) and any(a.kind == Kind.SO for a in s.rows[1])


def test_docstring_picture_is_current():
    mod = importlib.import_module("schedules.generators.looped_bfs")   # the package re-exports the function
    tl = simulate(generate("looped-bfs", 4, 8), StageCosts.uniform(8, 1.0, 2.0, 0.0))
    assert "\n".join("    " + ln for ln in timeline_ascii(tl).splitlines()) in mod.__doc__
