"""V-Half and V-Min (v_shape.py): building blocks, the memory bound, the V placement."""
import pytest

from schedules import Kind, StageCosts, generate, simulate
from schedules.generators import V_SHAPED, model_stages
from schedules.generators.v_shape import PERIOD, building_block, repeated_rows
from schedules.simulator import makespan
from schedules.formats.text import timeline_ascii
from schedules.generators.common import assemble_devices
from schedules.generators.zero_bubble import zb_v_stage_to_device

# the paper's peak activation memory in micro-batches of one device (each chunk
# holds half): V-Min floor((p+4)/3), V-Half floor((p+2)/2), 1F1B p
BOUND = {"v-min": lambda p: (p + 4) // 3, "v-half": lambda p: (p + 2) // 2}


def per_chunk(p, **kw):
    """A device's micro-batch split over its two chunks: f = 1, I = W = 1 each,
    half a device's activations each (kept until W: M_W = M_B)."""
    return StageCosts.uniform(2 * p, 1.0, 2.0, 0.0, act_bytes=0.5, **kw)


@pytest.mark.parametrize("name", sorted(BOUND))
@pytest.mark.parametrize("p", range(1, 9))
def test_the_largest_device_peak_is_the_papers_and_tight(name, p):
    """Every device holds at most BOUND(p) micro-batches' worth (the blocks'
    lifespans, which the repeated block overlaps to, and the relaxation never
    exceeds), against 1F1B's p; the bound is reached once m >= p."""
    for m in (2, p, 2 * p + 1):
        tl = simulate(generate(name, p, m), per_chunk(p))
        peak = max(st.peak_activation_bytes for st in tl.stages)
        assert peak <= min(BOUND[name](p), m)
        if m >= p:
            assert peak == BOUND[name](p)
    one = simulate(generate("1f1b", p, p), StageCosts.uniform(p, 2.0, 4.0, 0.0, act_bytes=1.0))
    assert max(st.peak_activation_bytes for st in one.stages) == p


@pytest.mark.parametrize("name", sorted(BOUND))
@pytest.mark.parametrize("p", range(1, 13))
def test_building_block_slots_are_apart_and_each_w_follows_its_i(name, p):
    for d in range(p):
        b = building_block(name, p, d)
        slots = [t for t, _, _ in b.slots()]
        assert len({t % PERIOD for t in slots}) == PERIOD
        assert all(0 < w - i < PERIOD for w, i in zip(b.weight_grad, b.input_grad))
        if d + 1 < p:      # the uniform offsets: chunk 0's forward down, chunk 1's up
            nxt = building_block(name, p, d + 1)
            assert nxt.forward[0] > b.forward[0] and nxt.forward[1] < b.forward[1]
            assert nxt.input_grad[1] > b.input_grad[1] and nxt.input_grad[0] < b.input_grad[0]


@pytest.mark.parametrize("name", sorted(BOUND))
@pytest.mark.parametrize("p,m", [(1, 1), (2, 1), (3, 2), (4, 5), (4, 8), (5, 3), (6, 13)])
def test_valid_v_placement_and_never_slower_than_the_repeated_blocks(name, p, m):
    s = generate(name, p, m)
    assert s.stage_to_device == zb_v_stage_to_device(p) and s.num_stages == model_stages(name, p) == 2 * p
    assert sum(len(r) for r in s.rows) == 2 * p * m * 3
    unit = StageCosts.uniform(2 * p, 1.0, 2.0, 0.0)
    repeated = assemble_devices(name, m, repeated_rows(name, p, m), zb_v_stage_to_device(p), (), ("full",))
    assert makespan(s, unit) <= makespan(repeated, unit)


def test_v_shaped_names_build_2p_stages():
    assert set(V_SHAPED) == {"zb-v", "v-half", "v-min"}
    assert [model_stages(n, 4) for n in V_SHAPED] == [8, 8, 8]


def test_recompute_and_swaps_on_model_stages():
    s = generate("v-min", 4, 8, adjusted=(0, 7), swap_blocks=1, swap_fraction=0.5)
    assert s.adjusted_stages == (0, 7)                  # both on device 0
    assert any(a.kind == Kind.SO for a in s.rows[0]) and not any(a.kind == Kind.SO for a in s.rows[1])


def test_docstring_pictures_are_current():
    import schedules.generators.v_shape as mod
    for name in ("v-half", "v-min"):
        tl = simulate(generate(name, 4, 8), StageCosts.uniform(8, 1.0, 2.0, 0.0))
        assert "\n".join("    " + ln for ln in timeline_ascii(tl).splitlines()) in mod.__doc__
