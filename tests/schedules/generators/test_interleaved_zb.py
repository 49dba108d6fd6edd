"""Interleaved zero bubble (torch's ScheduleInterleavedZeroBubble order); its
action-for-action match with torch's own output is in test_torch_goldens.py."""
import importlib

import pytest

from schedules import Kind, ScheduleError, StageCosts, generate, simulate
from schedules.generators import model_stages
from schedules.formats.text import timeline_ascii


def _unit(p, v):
    return StageCosts.uniform(p * v, 1.0, 2.0, 0.0)      # each chunk f = I = W = 1


def test_acceptance_p4_m4_v2_is_27_where_zb_v_takes_30():
    assert simulate(generate("interleaved-zb", 4, 4, virtual_stages=2), _unit(4, 2)).makespan == pytest.approx(27)
    assert simulate(generate("zb-v", 4, 4), _unit(4, 2)).makespan == pytest.approx(30)


@pytest.mark.parametrize("p,m,v", [(2, 4, 2), (4, 8, 2), (4, 16, 2), (8, 16, 2), (4, 8, 3), (4, 6, 2)])
def test_bubble_is_p_minus_1_when_a_round_fills_the_pipeline(p, m, v):
    """A device's work is 3mV; what is left is the p-1 units of the first forward's
    trip down and the last I's trip up, as in zb-h1."""
    tl = simulate(generate("interleaved-zb", p, m, virtual_stages=v), _unit(p, v))
    assert tl.makespan == pytest.approx(3 * m * v + p - 1)


def test_placement_warmup_and_delayed_w():
    s = generate("interleaved-zb", 4, 8, virtual_stages=2)
    assert s.stage_to_device == (0, 1, 2, 3, 0, 1, 2, 3) and model_stages("interleaved-zb", 4, 2) == 8
    row = s.rows[3]
    first_i = next(i for i, a in enumerate(row) if a.kind == Kind.I)
    assert first_i == (2 - 1) * 4 + 0 + 1           # (V-1)r + (p-1-d) warm-up forwards, then one F
    kinds = [a.kind for a in row[first_i - 1:first_i + 9]]
    # device 3's W start 3 pairs after its first I: F I F I F I F I W ...
    assert kinds == [Kind.F, Kind.I] * 4 + [Kind.W, Kind.F]


def test_one_virtual_stage_is_zb_h1():
    assert generate("interleaved-zb", 4, 8, virtual_stages=1).rows == generate("zb-h1", 4, 8).rows


@pytest.mark.parametrize("p,m,v", [(1, 1, 2), (2, 1, 2), (4, 2, 2), (4, 3, 3), (3, 2, 2)])
def test_few_micro_batches_are_valid(p, m, v):
    s = generate("interleaved-zb", p, m, virtual_stages=v)
    assert sum(len(r) for r in s.rows) == p * v * m * 3


def test_torchs_round_rule_refuses_what_torch_refuses():
    with pytest.raises(ScheduleError, match="multiple of the number of rounds"):
        generate("interleaved-zb", 4, 9, virtual_stages=2)       # rounds = 2, 9 % 2 != 0
    generate("interleaved-zb", 4, 10, virtual_stages=2)          # rounds 2, 5 micro-batches each (torch: ok)


def test_obscura_on_it_never_slower_never_fuller_and_migration_gains():
    costs = StageCosts.uniform(8, 0.5, 1.0, 0.5)
    rk = simulate(generate("interleaved-zb", 4, 8, adjusted=0), costs)
    ob = simulate(generate("obscura-interleaved-zb", 4, 8, adjusted=0, costs=costs), costs)
    mig = simulate(generate("obscura-interleaved-zb", 4, 8, adjusted=0, costs=costs, migrate=True), costs)
    assert ob.makespan <= rk.makespan * (1 + 1e-9) and mig.makespan < rk.makespan - 1
    assert all(a.peak_inflight_microbatches <= b.peak_inflight_microbatches for a, b in zip(ob.stages, rk.stages))


def test_docstring_picture_is_current():
    mod = importlib.import_module("schedules.generators.interleaved_zb")   # the package re-exports the function
    tl = simulate(generate("interleaved-zb", 4, 4), _unit(4, 2))
    assert "\n".join("    " + ln for ln in timeline_ascii(tl).splitlines()) in mod.__doc__
