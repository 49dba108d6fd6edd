"""schedules.generators.join: stage 0's I and W, adjacent on its device, become one B;
nothing else moves, and at unit costs no order gets slower."""
import pytest

from schedules import Kind, StageCosts, generate, simulate
from schedules.generators.join import join_first_stage_backward, joined_row
from schedules.ir import Action


def test_zb_h1s_first_stage_runs_whole_backwards_and_the_rest_keep_their_split():
    base = generate("zb-h1", 4, 8)
    joined = join_first_stage_backward(base)
    assert [a.kind for a in joined.rows[0]] == [Kind.F] * 4 + [Kind.B, Kind.F] * 4 + [Kind.B] * 4
    assert [a.microbatch for a in joined.rows[0] if a.kind == Kind.B] == list(range(8))
    assert joined.rows[1:] == base.rows[1:]
    assert joined.stages[0].recompute == base.stages[0].recompute


def test_a_w_moved_away_from_its_i_keeps_the_split():
    row = [Action(0, Kind.F, 0), Action(0, Kind.F, 1), Action(0, Kind.I, 0), Action(0, Kind.I, 1),
           Action(0, Kind.W, 1), Action(0, Kind.W, 0)]
    assert joined_row(row) == (Action(0, Kind.F, 0), Action(0, Kind.F, 1), Action(0, Kind.I, 0),
                               Action(0, Kind.B, 1), Action(0, Kind.W, 0))
    # another stage's pair on the same device, and a pair kept whole (overlapped), stay
    other = [Action(3, Kind.I, 0), Action(3, Kind.W, 0)]
    assert joined_row(other) == tuple(other)
    assert joined_row(row[2:4] + row[4:5], keep=frozenset({row[3]})) == tuple(row[2:5])


def test_an_order_with_nothing_to_join_is_returned_as_it_is():
    for name in ("1f1b", "interleaved", "gpipe"):
        s = generate(name, 4, 8)
        assert join_first_stage_backward(s) is s


@pytest.mark.parametrize("name,kw", [("zb-h1", {}), ("zb-h2", {}), ("interleaved-zb", {"virtual_stages": 2}),
                                     ("zb-1p", {}), ("zb-v", {}), ("v-half", {}), ("v-min", {}),
                                     ("zb-h1-capped", {})])
@pytest.mark.parametrize("p,m", [(2, 4), (4, 8), (4, 12)])
def test_joining_costs_no_time_at_unit_costs(name, kw, p, m):
    """F = 1, B = 2 = I + W: stage 0's input gradient goes nowhere, so the makespan stays."""
    base = generate(name, p, m, **kw)
    costs = StageCosts.uniform(base.num_stages, 1.0, 2.0, 0.0)
    joined = join_first_stage_backward(base)
    assert simulate(joined, costs).makespan <= simulate(base, costs).makespan + 1e-9
