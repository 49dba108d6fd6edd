"""planner.costs: the one place profile numbers become StageCosts, stage views and
partitions."""
from dataclasses import replace

import pytest

from planner.costs import (check_partition, input_grad_outputs, kept_bytes, move_unit, program_outputs, stage_costs,
                           stage_views, working_bytes)
from planner.errors import PlanError
from planner.profile import FULL
from tests.planner.synthetic import MB, synthetic_profile


def test_stage_costs_sum_units_and_boundaries():
    prof = synthetic_profile(num_layers=4)  # 10 units
    part = ((0, 3), (3, 6), (6, 10))
    c = stage_costs(prof, part, [frozenset(), frozenset({"mlp_act"}), frozenset({FULL})])
    a, m, e, h = (prof.unit(k) for k in ("attn", "mlp", "embed", "head"))
    assert c.fwd[0] == pytest.approx(e.fwd_time + a.fwd_time + m.fwd_time)
    assert c.bwd[2] == pytest.approx(a.bwd_time + 2 * m.bwd_time + h.bwd_time)
    assert prof.kinds[3:6] == ("attn", "mlp", "attn")
    assert c.weight_bytes[1] == 2 * a.weight_bytes + m.weight_bytes
    assert c.recompute == (0.0, pytest.approx(m.op("mlp_act").fwd_time), pytest.approx(
        a.fwd_time + 2 * m.fwd_time + h.fwd_time))
    assert c.act_bytes_recompute[1] == c.act_bytes[1] - m.op("mlp_act").act_bytes
    assert c.act_bytes_recompute[2] == sum(prof.unit(k).input_bytes for k in prof.kinds[6:10])
    assert c.boundary_bytes == (a.input_bytes, m.input_bytes, 0.0)
    assert c.host_bandwidth == prof.host_bandwidth


def test_working_bytes_is_the_largest_single_unit():
    prof = synthetic_profile(num_layers=4)
    assert working_bytes(prof, (1, 5), ()) == 0
    assert working_bytes(prof, (1, 5), {"mlp_act", "attn_core"}) == 2.7 * MB
    assert working_bytes(prof, (1, 3), {FULL}) == pytest.approx(prof.unit("mlp").kept_bytes(()) - 1 * MB)


def test_partitions():
    assert check_partition([[0, 2], [2, 5]], 5) == ((0, 2), (2, 5))
    for bad in ([(0, 2), (3, 5)], [(0, 2), (2, 2), (2, 5)], [(0, 2), (2, 4)]):
        with pytest.raises(PlanError):
            check_partition(bad, 5)
    part = ((0, 4), (4, 8), (8, 12), (12, 16))
    assert move_unit(part, 0, 3) == ((0, 3), (3, 7), (7, 11), (11, 16))
    assert move_unit(part, 3, 1) == ((0, 4), (4, 9), (9, 13), (13, 16))
    with pytest.raises(PlanError):
        move_unit(((0, 1), (1, 4)), 0, 1)


def test_kept_bytes_takes_the_larger_traced_figure():
    prof = synthetic_profile(num_layers=2)
    traced = lambda kind, r: 123 * MB if kind == "attn" else 0.0  # noqa: E731
    assert kept_bytes(prof, (1, 3), (), traced) == 123 * MB + prof.unit("mlp").kept_bytes(())
    assert stage_views(prof, ((0, 3), (3, 6)))[1].kinds == ("attn", "mlp", "head")


def test_a_split_stage_counts_what_its_i_makes_where_the_profile_measured_it():
    """I's outputs live beside the residuals: the input gradient, and what it computes
    for W (weight_grad_made_bytes summed over the stage's units); a profile without
    the field, or a W that re-derives its inputs, counts the whole W block there."""
    prof = synthetic_profile(num_layers=4, split=True)
    part = ((0, 3), (3, 6), (6, 10))
    costs = stage_costs(prof, part, [frozenset()] * 3)
    dx = costs.boundary_bytes[0]
    assert input_grad_outputs(prof, part[1]) is None
    assert program_outputs(costs, 1, True) == dx + costs.weight_grad_held_bytes(1)
    assert program_outputs(costs, 1, False) == dx
    made = replace(prof, units=tuple((k, replace(u, weight_grad_made_bytes=0.25 * u.weight_grad_bytes))
                                     for k, u in prof.units))
    want = sum(0.25 * prof.unit(k).weight_grad_bytes for k in prof.kinds[3:6])
    assert input_grad_outputs(made, part[1]) == pytest.approx(want)
    assert input_grad_outputs(made, part[1], "rederive") is None
    assert program_outputs(costs, 1, True, input_grad_outputs(made, part[1])) == pytest.approx(dx + want)
    assert dx + want < program_outputs(costs, 1, True)
    # what I allocates beside the residuals (XLA wrote the rest into the leaves it takes
    # donated) replaces what it computes, where every unit of the stage has it
    beside = replace(made, units=tuple((k, replace(u, weight_grad_beside_bytes=0.1 * u.weight_grad_bytes))
                                       for k, u in made.units))
    less = sum(0.1 * prof.unit(k).weight_grad_bytes for k in prof.kinds[3:6])
    assert less < want and input_grad_outputs(beside, part[1]) == pytest.approx(less)
    one_unit = dict(beside.units)      # a kind of the stage without it: what I computes, summed
    one_unit[prof.kinds[4]] = replace(one_unit[prof.kinds[4]], weight_grad_beside_bytes=None)
    partly = replace(beside, units=tuple(one_unit.items()))
    assert input_grad_outputs(partly, part[1]) == pytest.approx(want)
