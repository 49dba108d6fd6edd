"""Interleaved 1F1B (Megatron's order)."""
import pytest

from schedules import Kind, ScheduleError, StageCosts, generate, simulate
from schedules.generators.interleaved import interleaved_row
from schedules.formats.text import timeline_ascii


def test_acceptance_p4_m8_v2_is_the_1f1b_bubble_over_v():
    tl = simulate(generate("interleaved", 4, 8, virtual_stages=2), StageCosts.uniform(8, 0.5, 1.0, 0.0))
    assert tl.makespan == pytest.approx(28.5)              # 8 * 3 + (4 - 1) * 3 / 2


@pytest.mark.parametrize("p,m,v", [(2, 4, 2), (4, 8, 3), (4, 16, 2), (8, 16, 2), (8, 8, 4), (3, 9, 2)])
def test_bubble_is_p_minus_1_times_f_plus_b_over_v(p, m, v):
    f, b = 1.0 / v, 2.0 / v                                  # one device's model split into v chunks
    tl = simulate(generate("interleaved", p, m, virtual_stages=v), StageCosts.uniform(p * v, f, b, 0.0))
    assert tl.makespan == pytest.approx(m * 3.0 + (p - 1) * 3.0 / v)


def test_megatron_warmup_placement_and_round_order():
    s = generate("interleaved", 4, 8, virtual_stages=2)
    assert s.stage_to_device == (0, 1, 2, 3, 0, 1, 2, 3) and s.num_stages == 8
    row = s.rows[1]
    first_b = next(i for i, a in enumerate(row) if a.kind == Kind.B)
    assert first_b == (4 - 1 - 1) * 2 + (2 - 1) * 4 + 1      # Megatron's warm-up, then one steady forward
    assert [a.long for a in row[:9]] == ["1F0", "1F1", "1F2", "1F3", "5F0", "5F1", "5F2", "5F3", "1F4"]
    assert row[first_b].long == "5B0"                          # backwards: last chunk first
    assert [a.long for a in generate("interleaved", 2, 2, virtual_stages=2).rows[0][:4]] == \
        ["0F0", "0F1", "2F0", "2F1"]                           # m == p: every forward first, as Megatron


def test_one_virtual_stage_is_the_1f1b_order():
    assert generate("interleaved", 4, 8, virtual_stages=1).rows == generate("1f1b", 4, 8).rows


def test_recompute_and_swaps_on_chunks():
    s = generate("interleaved", 4, 8, adjusted=1, swap_blocks=2, swap_fraction=0.5)
    assert s.adjusted_stages == (0, 1)
    assert any(a.kind == Kind.SO for a in s.rows[1]) and s.stages[0].swap_fraction == 0.5
    tl = simulate(s, StageCosts.uniform(8, 0.5, 1.0, 0.5, act_bytes=1.0, host_bandwidth=4.0))
    assert tl.stages[0].recompute == pytest.approx(8 * 0.5)


@pytest.mark.parametrize("args,kw,needle", [((4, 6), {}, "multiple of the pipeline depth"),
                                            ((4, 8), {"virtual_stages": 0}, "virtual stages must be"),
                                            ((4, 8), {"adjusted": 8}, "adjusted K=8 must be in 0..7")])
def test_bad_arguments(args, kw, needle):
    with pytest.raises(ScheduleError, match=needle):
        generate("interleaved", *args, **kw)


def test_docstring_picture_is_current():
    import importlib
    mod = importlib.import_module("schedules.generators.interleaved")   # the package exports the function
    tl = simulate(generate("interleaved", 4, 8), StageCosts.uniform(8, 1.0, 2.0, 0.0))
    assert tl.makespan == 57
    assert "\n".join("    " + ln for ln in timeline_ascii(tl).splitlines()) in mod.__doc__
    assert interleaved_row(0, 4, 8, 2)[0].long == "0F0"
