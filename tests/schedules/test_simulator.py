import math

import pytest

from schedules import Action, Kind, Schedule, ScheduleError, StageCosts, StageSpec, generate, simulate
from tests.schedules.helpers import longest_path_times

UNIT = StageCosts.uniform(4, fwd=1, bwd=2, recompute=1)


@pytest.mark.parametrize("name,kw,expected", [
    ("1f1b", {}, 33), ("gpipe", {}, 33),
    ("recomp", {"adjusted": "all"}, 44), ("1f1b", {"adjusted": "all"}, 44),
    ("recomp", {"adjusted": 0}, 38), ("strawman", {"adjusted": 0}, 34),
    ("recomp", {"adjusted": 1}, 40), ("strawman", {"adjusted": 1}, 36), ("obscura", {"adjusted": 1}, 36),
])
def test_acceptance_makespans_p4_m8(name, kw, expected):
    assert simulate(generate(name, 4, 8, **kw), UNIT).makespan == pytest.approx(expected)


@pytest.mark.parametrize("p,m", [(1, 1), (2, 5), (4, 8), (8, 16), (5, 3)])
def test_1f1b_formula_and_paper_bubbles(p, m):
    tl = simulate(generate("1f1b", p, m), StageCosts.uniform(p, 1, 2, 0))
    assert tl.makespan == pytest.approx((m + p - 1) * 3)
    if m >= p:
        for s, st in enumerate(tl.stages):
            assert st.forward_bubble == pytest.approx(2 * (p - s - 1))   # section 2
            assert st.backward_bubble == pytest.approx(p - s - 1)
            assert st.peak_inflight_microbatches == p - s
            assert st.compute + st.idle == pytest.approx(tl.makespan)


@pytest.mark.parametrize("name,kw", [("1f1b", {}), ("recomp", {"adjusted": 1}), ("strawman", {"adjusted": 2}),
                                     ("obscura", {"adjusted": 2, "swap_blocks": 1, "swap_fraction": 0.5}),
                                     ("gpipe", {"adjusted": "all"})])
def test_simulation_equals_independent_longest_path(name, kw):
    costs = StageCosts(fwd=(1.0, 1.5, 0.7, 1.2), bwd=(2.0, 2.5, 1.9, 2.2), recompute=(0.5, 1.0, 0.3, 0.6),
                       act_bytes=(4.0, 3.0, 2.0, 1.0), host_bandwidth=3.0, boundary_bytes=(1, 1, 1, 0),
                       p2p_latency=0.1, p2p_bandwidth=10.0)
    s = generate(name, 4, 8, **kw)
    tl = simulate(s, costs)
    ref = longest_path_times(s, costs)
    for op in tl.ops:
        assert (op.start, op.end) == pytest.approx(ref[(op.stage, op.action)])
    assert tl.makespan == pytest.approx(max(e for _, e in ref.values()))


def test_p2p_delays_show_up_as_comm_wait():
    costs = StageCosts.uniform(2, 1, 2, 0, p2p_latency=0.5)
    tl = simulate(generate("1f1b", 2, 1), costs)
    f1, b0 = tl.op(1, "F0"), tl.op(0, "B0")
    assert f1.start == pytest.approx(1.5) and b0.start == pytest.approx(1.5 + 1 + 2 + 0.5)
    assert tl.stages[1].comm_wait == pytest.approx(0.5) and tl.stages[0].comm_wait == pytest.approx(0.5)
    assert tl.makespan == pytest.approx(7.0)


def _one_stage(actions: str, beta=1.0, recompute=()):
    return Schedule("t", 1, 3, (StageSpec(tuple(Action.parse(a, 0) for a in actions.split()), recompute, beta),))


def test_swap_uses_host_links_not_compute_and_backward_waits_for_swap_in():
    # kept 4 bytes, beta 1, 2 bytes/time: each transfer takes 2
    costs = StageCosts.uniform(1, 1, 2, 0, act_bytes=4.0, host_bandwidth=2.0)
    tl = simulate(_one_stage("F0 SO0 F1 SO1 F2 SI0 B0 SI1 B1 B2"), costs)
    t = {o.action: (o.start, o.end) for o in tl.ops}
    assert t["SO0"] == (1, 3) and t["F1"] == (1, 2)          # swap overlaps compute
    assert t["SO1"] == (3, 5)                                # one transfer at a time per direction
    assert t["SI0"] == (5, 7)                                # after the SO listed before it ends
    assert t["B0"] == (7, 9)                                 # waits for its swap-in
    assert t["SI1"] == (9, 11) and t["B1"] == (11, 13)          # issued once B0, listed before it, ends
    assert tl.stages[0].swap == pytest.approx(8) and tl.stages[0].comm_wait == pytest.approx(4 + 2)


def test_swap_in_and_out_run_concurrently_full_duplex():
    costs = StageCosts.uniform(1, 1, 2, 0, act_bytes=4.0, host_bandwidth=2.0)
    tl = simulate(_one_stage("F0 SO0 F1 F2 SI0 SO2 B0 B1 SI2 B2"), costs)
    t = {o.action: (o.start, o.end) for o in tl.ops}
    assert t["SI0"] == (3, 5) and t["SO2"] == (3, 5)


def test_memory_accounting_with_swaps():
    costs = StageCosts.uniform(1, 1, 2, 0, act_bytes=4.0, host_bandwidth=2.0)
    tl = simulate(_one_stage("F0 SO0 F1 SO1 F2 SI0 B0 SI1 B1 B2", beta=0.5), costs)
    mem = dict(tl.memory[0])
    # F0 +4 at 0; F1 +4 at 1; SO0 frees 2 at 2; F2 +4 at 2 (free first): 8 -> 6 -> 10
    assert mem[0] == 4 and mem[1] == 8 and mem[2] == 10
    assert tl.stages[0].peak_activation_bytes == pytest.approx(10)
    assert tl.stages[0].peak_inflight_microbatches == 3
    assert tl.memory[0][-1][1] == pytest.approx(0)


def test_adjusted_stage_uses_recompute_bytes_and_time():
    costs = StageCosts.uniform(1, 1, 2, 0.5, act_bytes=10.0, act_bytes_recompute=1.0)
    tl = simulate(_one_stage("F0 F1 F2 B0 B1 B2", beta=0.0, recompute=("full",)), costs)
    assert tl.stages[0].peak_activation_bytes == pytest.approx(3.0)
    assert tl.op(0, "B0").recompute == 0.5 and tl.op(0, "B0").duration == 2.5
    assert tl.stages[0].recompute == pytest.approx(1.5)


def test_weight_grad_split_backward():
    costs = StageCosts.uniform(2, 1, 2, 0, weight_grad_fraction=0.25)
    s = Schedule("zb", 2, 1, (StageSpec(tuple(Action.parse(a, 0) for a in "F0 B0 W0".split())),
                              StageSpec(tuple(Action.parse(a, 1) for a in "F0 B0 W0".split()))))
    tl = simulate(s, costs)
    assert tl.op(1, "B0").duration == pytest.approx(1.5) and tl.op(1, "W0").duration == pytest.approx(0.5)
    assert tl.op(0, "B0").start == pytest.approx(tl.op(1, "B0").end)   # not after W
    assert tl.makespan == pytest.approx(1 + 1 + 1.5 + 1.5 + 0.5)


def test_cost_stage_count_must_match():
    with pytest.raises(ScheduleError, match="costs describe 3 stages"):
        simulate(generate("1f1b", 4, 4), StageCosts.uniform(3))


def test_infinite_bandwidth_makes_swaps_free():
    s = generate("obscura", 4, 8, adjusted=1, swap_blocks=2, swap_fraction=1.0)
    assert simulate(s, UNIT).makespan == simulate(generate("obscura", 4, 8, adjusted=1), UNIT).makespan
    assert all(math.isclose(o.duration, 0) for o in simulate(s, UNIT).ops if o.kind in (Kind.SO, Kind.SI))


def test_split_backward_costs_default_to_halves_and_can_be_explicit():
    s = generate("zb-h1", 2, 2, adjusted=0)
    tl = simulate(s, StageCosts.uniform(2, 1, 2, 0.5))
    assert tl.op(1, "I0").duration == pytest.approx(1.0) and tl.op(1, "W0").duration == pytest.approx(1.0)
    assert tl.op(0, "I0").duration == pytest.approx(1.5) and tl.op(0, "I0").recompute == pytest.approx(0.5)
    explicit = StageCosts.uniform(2, 1, 2, 0.5, input_grad=(0.7, 0.9), weight_grad=(1.5, 1.1))
    tl = simulate(s, explicit)
    assert tl.op(0, "I0").duration == pytest.approx(1.2) and tl.op(1, "W1").duration == pytest.approx(1.1)
    assert tl.op(0, "I0").start == pytest.approx(tl.op(1, "I0").end)      # upstream waits for I, not W


def test_stages_on_one_device_share_its_stream_and_skip_the_transfer():
    s = generate("zb-v", 2, 2)        # device 0: stages 0 and 3; device 1: stages 1 and 2
    costs = StageCosts.uniform(4, 1, 2, 0, p2p_latency=0.25)
    tl = simulate(s, costs)
    for d in range(2):
        ops = sorted((o for o in tl.device_ops(d) if o.kind != Kind.SO), key=lambda o: o.start)
        assert all(a.end <= b.start + 1e-12 for a, b in zip(ops, ops[1:]))   # one compute stream
    assert tl.op(2, "F0").start == pytest.approx(tl.op(1, "F0").end)          # turn of the V: no p2p
    assert tl.op(1, "F0").start == pytest.approx(tl.op(0, "F0").end + 0.25)
    ref = longest_path_times(s, costs)
    assert tl.makespan == pytest.approx(max(e for _, e in ref.values()))


@pytest.mark.parametrize("name,kw", [("interleaved", {"virtual_stages": 3, "adjusted": 2}), ("zb-v", {"adjusted": 1}),
                                     ("zb-h1", {"adjusted": 1, "swap_blocks": 1, "swap_fraction": 0.5}),
                                     ("obscura-interleaved", {"adjusted": 1, "swap_blocks": 2, "swap_fraction": 1.0}),
                                     ("obscura-zb-h1", {"adjusted": 1, "migrate": True})])
def test_new_schedules_equal_the_independent_longest_path(name, kw):
    n = 12 if name == "interleaved" else 8 if name in ("zb-v", "obscura-interleaved") else 4
    costs = StageCosts(fwd=tuple(0.5 + 0.1 * s for s in range(n)), bwd=tuple(1.0 + 0.15 * s for s in range(n)),
                       recompute=(0.4,) * n, act_bytes=(3.0,) * n, act_bytes_recompute=(1.0,) * n,
                       host_bandwidth=2.0, boundary_bytes=(1.0,) * n, p2p_latency=0.05, p2p_bandwidth=8.0,
                       weight_grad_fraction=0.4)
    s = generate(name, 4, 8, costs=costs, **kw)
    tl = simulate(s, costs)
    ref = longest_path_times(s, costs)
    for op in tl.ops:
        assert (op.start, op.end) == pytest.approx(ref[(op.stage, op.action)])


@pytest.mark.parametrize("name,kw", [
    ("1f1b", {}), ("obscura", {"adjusted": 1, "swap_blocks": 2, "swap_fraction": 0.5}),
    ("interleaved", {"virtual_stages": 2}), ("zb-h1", {}), ("zb-v", {}),
    ("obscura-zb-h1", {"adjusted": 1, "swap_blocks": 2, "swap_fraction": 1.0}),
])
def test_held_peaks_are_the_timelines_makespan_and_held_peaks(name, kw):
    # the search's light path (schedules.simulator.held_peaks) against the full Timeline,
    # with kept bytes, recompute bytes, I's frees, the inbox and p2p lags all non-zero
    from schedules.simulator import held_peaks
    s = generate(name, 4, 8, **kw)
    n = s.num_stages
    costs = StageCosts(fwd=tuple(0.5 + 0.1 * i for i in range(n)), bwd=tuple(1.0 + 0.05 * i for i in range(n)),
                       recompute=(0.3,) * n, act_bytes=tuple(100.0 + 10 * i for i in range(n)),
                       act_bytes_recompute=(40.0,) * n, boundary_bytes=(8.0,) * n, p2p_bandwidth=80.0,
                       host_bandwidth=500.0)
    tl = simulate(s, costs)
    makespan, peaks = held_peaks(s, costs)
    assert makespan == tl.makespan
    assert peaks == tuple(st.peak_held_bytes for st in tl.stages)


def test_on_one_device_is_a_valid_order_when_copies_start_late():
    """The merged row is a topological order even where a stage's SO starts on its
    copy lane after the stage's next forward (slow host links, launch overhead, link
    sharing): merging by start time alone put 1F4 before 0F4 (the H200 GPU tier,
    2026-12-02; 188 of 3,000 such random cases)."""
    import random

    from schedules.simulator import on_one_device
    from schedules.validator import validate
    for seed in range(60):
        r = random.Random(seed)
        p = 4
        costs = StageCosts(fwd=tuple(r.uniform(0.01, 2) for _ in range(p)),
                           bwd=tuple(r.uniform(0.02, 4) for _ in range(p)),
                           recompute=tuple(r.uniform(0, 1) for _ in range(p)), act_bytes=(1e6,) * p,
                           act_bytes_recompute=(5e5,) * p, weight_bytes=(1e6,) * p,
                           boundary_bytes=(r.uniform(1e3, 1e7),) * p,
                           p2p_bandwidth=r.choice([1e7, 1e9, 1e12, float("inf")]),
                           host_bandwidth=r.choice([1e5, 1e6, 1e8, 1e9, 1e11]),
                           action_overhead=r.choice([0, 0.01, 0.3]), link_sharing=r.choice([0.0, 0.5, 0.9]))
        sched = generate("obscura", p, r.choice([4, 8, 12]), adjusted=r.choice([0, 1, 2]),
                                   swap_blocks=r.choice([1, 2, 3]), swap_fraction=r.choice([0.3, 0.5, 1.0]))
        validate(on_one_device(sched, costs))
