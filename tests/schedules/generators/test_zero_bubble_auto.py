"""ZB-1p and ZB-2p: the zero-bubble heuristic under a memory limit (zero_bubble_auto.py)."""
import math

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from schedules import Kind, ScheduleError, StageCosts, generate, simulate
from schedules.generators.common import setup
from schedules.generators.zero_bubble_auto import auto_rows, zb_auto
from schedules.formats.text import timeline_ascii
from tests.budget import examples

GRID = [(p, m) for p in (1, 2, 3, 4, 5) for m in (1, 2, p, 2 * p + 1, 3 * p)]
SETTINGS = dict(deadline=None, derandomize=True, database=None, suppress_health_check=[HealthCheck.too_slow])


def unit(p, **kw):
    return StageCosts.uniform(p, 1.0, 2.0, 0.0, **kw)     # f = 1, I = W = 1, no communication


@pytest.mark.parametrize("p,m", GRID)
def test_at_1f1bs_memory_never_slower_than_zb_h1_and_at_twice_than_zb_h2(p, m):
    """Unit costs, blocks held until W: ZB-1p within p blocks per device, ZB-2p
    within 2p, each at most as long as the handcrafted schedule of its memory."""
    one, two = simulate(generate("zb-1p", p, m), unit(p)), simulate(generate("zb-2p", p, m), unit(p))
    assert one.makespan <= simulate(generate("zb-h1", p, m), unit(p)).makespan
    assert two.makespan <= simulate(generate("zb-h2", p, m), unit(p)).makespan
    assert max(s.peak_inflight_microbatches for s in one.stages) <= p
    assert max(s.peak_inflight_microbatches for s in two.stages) <= 2 * p
    assert sum(len(r) for r in generate("zb-2p", p, m).rows) == 3 * p * m


@pytest.mark.parametrize("p,m", [(2, 5), (4, 8), (4, 9), (5, 12)])
def test_the_papers_memory_model_bounds_the_peak_in_bytes(p, m):
    """F adds M_B, I frees M_B - M_W, W the rest (act_bytes = M_B, weight_grad_held
    = M_W): the fold's peak stays within p M_B and 2p M_B, and with M_W < M_B the
    limit lets ZB-1p keep more than p blocks waiting for their W."""
    costs = unit(p, act_bytes=1.0, weight_grad_held=0.6)
    one = simulate(generate("zb-1p", p, m, costs=costs), costs)
    two = simulate(generate("zb-2p", p, m, costs=costs), costs)
    assert max(s.peak_activation_bytes for s in one.stages) <= p * (1 + 1e-9)
    assert max(s.peak_activation_bytes for s in two.stages) <= 2 * p * (1 + 1e-9)
    assert one.makespan <= simulate(generate("zb-h1", p, m), costs).makespan
    assert two.makespan == pytest.approx(3 * m + p - 1)


@st.composite
def limited(draw):
    p, m = draw(st.integers(1, 5)), draw(st.integers(1, 10))
    act = [draw(st.floats(0.5, 2.0)) for _ in range(p)]
    costs = StageCosts(fwd=tuple(draw(st.floats(0.2, 2.0)) for _ in range(p)),
                       bwd=tuple(draw(st.floats(0.5, 4.0)) for _ in range(p)),
                       recompute=tuple(draw(st.floats(0.0, 1.0)) for _ in range(p)), act_bytes=tuple(act),
                       act_bytes_recompute=tuple(a * draw(st.floats(0.1, 1.0)) for a in act),
                       freed_by_input_grad=tuple(a * draw(st.floats(0.0, 0.5)) for a in act),
                       boundary_bytes=tuple(draw(st.floats(0.0, 1.0)) for _ in range(p)),
                       p2p_bandwidth=draw(st.sampled_from([math.inf, 4.0])),
                       weight_grad_fraction=draw(st.floats(0.2, 0.8)))
    adjusted = draw(st.sampled_from([None, 0, "all"]))
    limit = max(act) * draw(st.floats(2.0, 3.0 * p))
    return p, m, costs, adjusted, limit


@settings(max_examples=examples(25), **SETTINGS)
@given(limited())
def test_any_limit_in_bytes_holds_and_the_makespan_is_the_simulators(case):
    """Random costs (recompute re-materialising until W, p2p), a limit in bytes:
    every device's peak stays within it, and the heuristic's makespan is what the
    simulator gives its rows."""
    p, m, costs, adjusted, limit = case
    st_ = setup(p, m, adjusted, ("full",))
    rows, t = auto_rows(st_, costs, limit)
    s = zb_auto(p, m, memory_limit=limit, costs=costs, adjusted=adjusted)
    assert [list(r) for r in s.rows] == rows
    tl = simulate(s, costs)
    assert tl.makespan == pytest.approx(t)
    assert max(x.peak_activation_bytes for x in tl.stages) <= limit * (1 + 1e-9)


def test_a_tighter_limit_holds_fewer_blocks_and_runs_longer():
    costs = unit(4)
    loose, tight = (simulate(zb_auto(4, 8, memory_limit=lim, costs=costs), costs) for lim in (8, 2))
    assert max(s.peak_inflight_microbatches for s in tight.stages) == 2
    assert max(s.peak_inflight_microbatches for s in loose.stages) > 4
    assert tight.makespan > loose.makespan
    per_device = simulate(zb_auto(4, 8, memory_limit=(2, 3, 4, 4), costs=costs), costs)
    assert [s.peak_inflight_microbatches <= lim for s, lim in zip(per_device.stages, (2, 3, 4, 4))] == [True] * 4


@pytest.mark.parametrize("limit,needle", [
    (0.5, "holds less than one block"), (-1, "must be a number >= 0"), ((4, 4), "or 4 of them"),
    (math.nan, "must be a number"), (True, "must be a number")])
def test_bad_limits_are_refused(limit, needle):
    with pytest.raises(ScheduleError, match=needle):
        zb_auto(4, 8, memory_limit=limit)


def test_recompute_and_swaps_apply_to_the_adjusted_stages():
    s = generate("zb-1p", 4, 8, adjusted=1, swap_blocks=1, swap_fraction=0.5)
    assert s.adjusted_stages == (0, 1)
    assert {a.kind for a in s.rows[1]} == {Kind.F, Kind.I, Kind.W, Kind.SO, Kind.SI}
    assert s.name == "zb-1p" and generate("zb-2p", 4, 8).name == "zb-2p"


def test_docstring_pictures_are_current():
    import schedules.generators.zero_bubble_auto as mod
    for name in ("zb-1p", "zb-2p"):
        tl = simulate(generate(name, 4, 8), unit(4))
        assert "\n".join("    " + ln for ln in timeline_ascii(tl).splitlines()) in mod.__doc__
