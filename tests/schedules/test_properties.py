"""Property tests (hypothesis): 1,200 random (p, m, K, caps, costs) instances.

Every generated schedule validates, its simulation equals an independent longest
path (unit costs without communication, and random costs with p2p and swaps), its
statistics are consistent, its issue order respects every dependency, and any
dropped / duplicated / reordered action is rejected with the grid message.
"""
import math

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from schedules import (SCHEDULES, Kind, ScheduleError, StageCosts, generate, io, issue_order, simulate,
                       validate)
from schedules.generators import CHUNKED, model_stages
from schedules.generators.common import resolve_adjusted, warmup_count
from tests.schedules.helpers import corrupt, longest_path_times
from tests.budget import examples

SETTINGS = dict(deadline=None, derandomize=True, database=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def stage_costs(draw, p):
    fwd = [draw(st.floats(0.1, 3.0)) for _ in range(p)]
    bwd = [f * draw(st.floats(1.0, 3.0)) for f in fwd]
    rec = [f * draw(st.floats(0.0, 1.2)) for f in fwd]
    act = [draw(st.floats(0.0, 10.0)) for _ in range(p)]
    return StageCosts(fwd=tuple(fwd), bwd=tuple(bwd), recompute=tuple(rec), act_bytes=tuple(act),
                      act_bytes_recompute=tuple(a * draw(st.floats(0.0, 1.0)) for a in act),
                      boundary_bytes=tuple(draw(st.floats(0.0, 2.0)) for _ in range(p)),
                      p2p_latency=draw(st.sampled_from([0.0, 0.05, 0.3])),
                      p2p_bandwidth=draw(st.sampled_from([math.inf, 4.0, 20.0])),
                      host_bandwidth=draw(st.sampled_from([math.inf, 5.0, 40.0])))


@st.composite
def instances(draw, names=tuple(SCHEDULES)):
    p = draw(st.integers(1, 6))
    m = draw(st.integers(1, 12))
    name = draw(st.sampled_from(names))
    kw = {}
    if name in CHUNKED:
        kw["virtual_stages"] = draw(st.integers(1, 3))
        m = p * -(-m // p)             # Megatron's interleaving needs m % p == 0
    n = model_stages(name, p, kw.get("virtual_stages"))
    adjusted = draw(st.one_of(st.none(), st.integers(0, n - 1), st.just("all"),
                              st.lists(st.integers(0, n - 1), min_size=1, max_size=n).map(tuple)))
    costs = draw(stage_costs(n))
    kw.update(adjusted=adjusted, costs=costs)
    if name in ("1f1b", "recomp", "obscura", "zb-h1-capped") and draw(st.booleans()):
        caps = sorted((draw(st.integers(1, m + 2)) for _ in range(p)), reverse=True)   # non-increasing
        kw["warmup"] = tuple(caps)
    if name.startswith("obscura-") and draw(st.booleans()):
        kw["migrate"] = True
    base = generate(name, p, m, **kw)
    adj = base.adjusted_stages
    if adj and draw(st.booleans()):
        k = max(base.stage_to_device[a] for a in adj)      # the last device that recomputes
        room = warmup_count(base.rows[k]) - 1
        if room >= 1:
            kw["swap_blocks"] = draw(st.integers(1, room))
            kw["swap_fraction"] = draw(st.floats(0.05, 1.0))
    return name, p, m, kw


@settings(max_examples=examples(600), **SETTINGS)
@given(instances())
def test_generated_schedules_validate_and_simulate_exactly(inst):
    name, p, m, kw = inst
    s = generate(name, p, m, **kw)
    n = s.num_stages
    validate(s)
    assert io.schedule_from_json(io.schedule_to_json(s)) == s
    assert s.adjusted_stages == resolve_adjusted(
        "all" if kw["adjusted"] is None and (name in ("recomp", "strawman", "obscura") or name.startswith("obscura-"))
        else kw["adjusted"], n)

    # unit costs, no communication: the makespan is the longest path of the graph
    unit = StageCosts.uniform(n, 1.0, 2.0, 1.0)
    tl = simulate(s, unit)
    ref = longest_path_times(s, unit)
    assert tl.makespan == pytest.approx(max(e for _, e in ref.values()))

    # random costs with p2p and swaps: every op's times match the independent graph
    costs = kw["costs"]
    tl = simulate(s, costs)
    ref = longest_path_times(s, costs)
    for op in tl.ops:
        assert (op.start, op.end) == pytest.approx(ref[(op.stage, op.action)], abs=1e-9)
    for d, (stats, mem) in enumerate(zip(tl.stages, tl.memory)):
        assert stats.compute + stats.idle == pytest.approx(tl.makespan)
        assert 1 <= stats.peak_inflight_microbatches <= m * len(s.stages_on(d))
        assert stats.recompute <= stats.compute + 1e-9
        assert mem[-1][1] == pytest.approx(0.0, abs=1e-6)
        assert all(b >= -1e-6 for _, b in mem)

    order = issue_order(s, costs)
    pos = {a: i for i, a in enumerate(order)}
    assert len(pos) == sum(len(spec.actions) for spec in s.stages)
    for row in s.rows:
        assert [pos[a] for a in row] == sorted(pos[a] for a in row)
    backward = {(a.stage, a.microbatch): a for a in order if a.kind in (Kind.B, Kind.I)}
    for a in order:
        if a.kind == Kind.F and a.stage > 0:
            assert pos[a] > pos[type(a)(a.stage - 1, Kind.F, a.microbatch)]
        if a.kind in (Kind.B, Kind.I) and a.stage < n - 1:
            assert pos[a] > pos[backward[(a.stage + 1, a.microbatch)]]


@settings(max_examples=examples(400), **SETTINGS)
@given(instances(), st.sampled_from(["drop", "duplicate", "b_before_f"]),
       st.integers(0, 5), st.integers(0, 100))
def test_corrupted_schedules_are_rejected_with_the_grid(inst, how, stage, pick):
    name, p, m, kw = inst
    s = generate(name, p, m, **kw)
    bad = corrupt(s, how, stage % s.num_devices, pick)
    with pytest.raises(ScheduleError) as e:
        validate(bad)
    lines = str(e.value).splitlines()
    assert lines[0].startswith(f"invalid schedule {name!r}: ")
    assert lines[1].startswith("step")
    assert len(lines) == s.num_devices + 2
    assert any("[" in ln or "<-" in ln for ln in lines[2:])


@settings(max_examples=examples(200), **SETTINGS)
@given(instances(), st.integers(0, 5), st.integers(0, 100))
def test_swapped_micro_batches_either_run_or_deadlock(inst, stage, pick):
    """No FIFO rule: two same-kind actions of a stage swapped make an order that is
    valid (and then simulates every action) or one refused for a wait that cannot be
    met: a deadlock, or a micro-batch's own order (B before its F, W before its I,
    a swap after the backward that needed it)."""
    name, p, m, kw = inst
    s = generate(name, p, m, **kw)
    if m < 2:
        return
    other = corrupt(s, "swap_same_kind", stage % s.num_devices, pick)
    try:
        validate(other)
    except ScheduleError as e:
        first = str(e).splitlines()[0]
        assert any(w in first for w in ("deadlock", "comes before its", "does not follow", "comes after")), first
        assert "micro-batch order" not in first
        return
    tl = simulate(other, kw["costs"])
    assert len(tl.ops) == sum(len(r) for r in other.rows)


@settings(max_examples=examples(200), **SETTINGS)
@given(st.integers(1, 6), st.integers(1, 16), st.data())
def test_obscura_never_slower_or_fuller_than_strawman(p, m, data):
    k = data.draw(st.integers(0, p - 1))
    costs = data.draw(stage_costs(p))
    ob = simulate(generate("obscura", p, m, adjusted=k, costs=costs), costs)
    sw = simulate(generate("strawman", p, m, adjusted=k), costs)
    assert ob.makespan <= sw.makespan * (1 + 1e-9)
    for a, b in zip(ob.stages, sw.stages):
        assert a.peak_inflight_microbatches <= b.peak_inflight_microbatches
