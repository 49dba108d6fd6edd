"""How a data x tensor stage mesh divides a stage's costs (planner.layouts.mesh_costs):
the division of one unit, the TP collectives, the registry's replicated parameters,
the per-device training state, the data-parallel sync lanes, and that the
sweep's TP units are the planner's division of its one-GPU units."""
import math
from dataclasses import replace

import pytest
from hypothesis import given, settings, strategies as st

import models
from models.units import unit_param_count
from planner.errors import PlanError
from planner.layouts import Hardware
from planner.layouts.memory import params_per_gpu
from planner.layouts.mesh_costs import (Collectives, MeshLayout, StageSync, UnitSplit, collective_time,
                                        data_parallel_seconds, device_weight_bytes, divide_unit,
                                        gradient_sync_end, mesh_profile, replicated_unit_params,
                                        tp_collectives, with_collectives)
from planner.layouts.unit_costs import analytic_units, layout_profile, unit_splits
from planner.profile import FULL, OpProfile, UnitProfile, UNIT_KINDS
from schedules import generate, simulate
from schedules.costs import StageCosts
from tests.budget import examples
from tests.planner.synthetic import synthetic_profile

HW = Hardware()
UNIT = UnitProfile(fwd_time=1.0, bwd_time=2.0, weight_bytes=1000.0, input_bytes=100.0,
                   ops=(("attn_norm", OpProfile(0.1, 100.0)), ("q", OpProfile(0.3, 400.0))),
                   full_recompute_time=0.8, input_grad_time=1.2, weight_grad_time=0.8, weight_grad_bytes=600.0)
SPLIT = UnitSplit(fwd=0.75, bwd=0.5, recompute=0.25, ops=frozenset({"q"}), input=1.0)


def test_one_device_is_the_unit_itself():
    assert divide_unit(UNIT, SPLIT, MeshLayout()) is UNIT
    prof = synthetic_profile()
    assert mesh_profile(prof, MeshLayout(), {}, {}, {}) is prof


def test_tensor_divides_split_ops_and_shares_only():
    u = divide_unit(UNIT, SPLIT, MeshLayout(1, 4))
    assert u.fwd_time == pytest.approx(0.25 + 0.75 / 4) and u.bwd_time == pytest.approx(2 * (0.5 + 0.5 / 4))
    assert u.full_recompute_time == pytest.approx(0.8 * (0.75 + 0.25 / 4))
    assert u.op("q") == OpProfile(0.3 / 4, 100.0) and u.op("attn_norm") == UNIT.op("attn_norm")
    assert u.input_bytes == 100.0                       # replicated without SP
    assert u.input_grad_time == pytest.approx(1.2 * 0.625) and u.weight_grad_time == pytest.approx(0.8 * 0.625)
    assert u.weight_grad_bytes == 600.0                 # W's block: divided by D only
    assert u.weight_bytes == UNIT.weight_bytes          # weights: device_weight_bytes


def test_data_divides_everything_per_microbatch():
    u = divide_unit(UNIT, SPLIT, MeshLayout(2, 1))
    assert u.fwd_time == 0.5 and u.bwd_time == 1.0 and u.input_bytes == 50.0 and u.weight_grad_bytes == 300.0
    assert u.op("attn_norm") == OpProfile(0.05, 50.0) and u.op("q") == OpProfile(0.15, 200.0)
    both = divide_unit(UNIT, SPLIT, MeshLayout(2, 2))
    assert both.kept_bytes(()) == pytest.approx((100 + 100 + 400 / 2) / 2)


def test_sequence_parallel_divides_the_rest_too():
    u = divide_unit(UNIT, replace(SPLIT, input=0.5), MeshLayout(1, 2, True))
    assert u.fwd_time == 0.5 and u.op("attn_norm").act_bytes == 50.0
    assert u.input_bytes == pytest.approx(100 * (0.5 + 0.25))     # only the hidden-state share
    with pytest.raises(PlanError, match="needs tensor"):
        MeshLayout(1, 1, True)
    for bad in (0, -1, True, 1.5):
        with pytest.raises(PlanError):
            MeshLayout(bad, 1)


def test_collectives_add_to_forward_and_the_input_gradient():
    comm = Collectives(fwd=0.1, bwd=0.2, regather=0.05, regather_op="q")
    u = with_collectives(UNIT, comm)
    assert (u.fwd_time, u.bwd_time, u.input_grad_time, u.weight_grad_time) == pytest.approx((1.1, 2.2, 1.4, 0.8))
    assert u.op("q").fwd_time == pytest.approx(0.35) and u.full_recompute_time == pytest.approx(0.85)
    assert with_collectives(UNIT, Collectives()) is UNIT


@pytest.mark.parametrize("name", ["llama2-13b", "gpt3-13b"])
def test_tp_collectives_follow_the_registry(name):
    cfg = models.get_config(name)
    tokens = 2048.0
    act = tokens * cfg.hidden * cfg.compute_bytes
    one = collective_time(act, 2, HW.nvlink_bandwidth, HW.collective_latency)
    tp2 = MeshLayout(1, 2)
    assert tp_collectives("embed", cfg, tokens, tp2, HW) == Collectives()   # the registry replicates it
    assert tp_collectives("attn", cfg, tokens, tp2, HW) == Collectives(one, one)
    # the head: the loss's max and sum forward, the input gradient's all-reduce backward
    stats = collective_time(2 * tokens * 4, 2, HW.nvlink_bandwidth, HW.collective_latency)
    assert tp_collectives("head", cfg, tokens, tp2, HW) == Collectives(stats, one)
    assert all(tp_collectives(k, cfg, tokens, MeshLayout(4, 1), HW) == Collectives() for k in UNIT_KINDS)
    sp = tp_collectives("mlp", cfg, tokens, MeshLayout(1, 2, True), HW)
    assert sp.regather_op in ("mlp_gate", "mlp_up") and sp.fwd == pytest.approx(one + HW.collective_latency)


@pytest.mark.parametrize("name", ["llama2-13b", "gpt3-13b", "llama2-tiny"])
def test_replicated_params_are_what_the_registry_leaves_whole(name):
    cfg = models.get_config(name)
    d = cfg.hidden
    gpt = cfg.family == "gpt"
    assert replicated_unit_params(cfg, "embed") == unit_param_count(cfg, "embed")
    assert replicated_unit_params(cfg, "attn") == replicated_unit_params(cfg, "mlp") == (3 * d if gpt else d)
    assert replicated_unit_params(cfg, "head") == (2 * d if gpt else d)


def test_device_weight_bytes_follow_params_and_moments():
    unit = replace(UNIT, weight_bytes=16 * 1000 + 4)       # fp32 params, grads, mu, nu + Adam's count
    assert device_weight_bytes(unit, 1000, 1000, 4, 1000) == unit.weight_bytes
    assert device_weight_bytes(unit, 1000, 250, 4, 1000) == 8 * 250 + 8 * 1000 + 4   # moments whole
    assert device_weight_bytes(unit, 1000, 250, 4, 250) == 16 * 250 + 4               # moments sharded


def test_data_parallel_seconds():
    lay = MeshLayout(4, 2)
    bw = HW.collective_bandwidth(8)
    grads, gather = data_parallel_seconds(1e9, 4, 4, lay, HW, zero1=False)
    assert grads == pytest.approx(2 * 3 / 4 * 4e9 / bw + HW.collective_latency) and gather == 0.0
    rs, ag = data_parallel_seconds(1e9, 2, 2, MeshLayout(16, 1), HW, zero1=True)
    assert rs == ag == pytest.approx(15 / 16 * 2e9 / HW.internode_bandwidth + HW.collective_latency)
    assert data_parallel_seconds(1e9, 4, 4, MeshLayout(1, 8), HW, zero1=False) == (0.0, 0.0)


def _timeline(schedule, p=2, m=4):
    sched = generate(schedule, p, m, **({"virtual_stages": 2} if schedule == "interleaved" else {}))
    n = sched.num_stages
    return simulate(sched, StageCosts(fwd=(1.0,) * n, bwd=(2.0,) * n))


def test_gradient_sync_after_the_last_backward():
    tl = _timeline("1f1b")
    last = [max(o.end for o in tl.stage_ops(s) if o.kind.value == "B") for s in range(2)]
    # not overlapped (the runtime): each stage ends at its last B + its collective
    end, worst = gradient_sync_end(tl, [StageSync(0.5), StageSync(3.0)], overlap_backward=False)
    assert end == pytest.approx(max(last[0] + 0.5, last[1] + 3.0)) and worst == 3.0
    # overlapped with the last backward (2 s long): only the excess shows
    end, worst = gradient_sync_end(tl, [StageSync(0.5), StageSync(3.0, after=0.25)], overlap_backward=True)
    assert worst == pytest.approx(1.0) and end == pytest.approx(max(last[0], last[1] + 1.25))


def test_stages_sharing_a_device_sync_one_after_another():
    tl = _timeline("interleaved")
    assert tl.stage_to_device == (0, 1, 0, 1)
    end, _ = gradient_sync_end(tl, [StageSync(5.0)] * 4, overlap_backward=False)
    last = [max(o.end for o in tl.stage_ops(s) if o.kind.value == "B") for s in range(4)]
    device_end = []
    for d in (0, 1):
        first, second = sorted((last[d], last[d + 2]))
        device_end.append(max(first + 5.0, second) + 5.0)     # the second waits for the first
    assert end == pytest.approx(max(device_end))


def test_mesh_profile_per_device_rows_and_errors():
    prof = replace(synthetic_profile(), micro_batch=4, layer_recompute_time=2.0)
    splits = {k: SPLIT for k in UNIT_KINDS}
    weights = {k: 1.0 for k in UNIT_KINDS}
    dev = mesh_profile(prof, MeshLayout(2, 2), splits, {"attn": Collectives(0.5, 0.5)}, weights)
    assert dev.micro_batch == 2 and all(dev.unit(k).weight_bytes == 1.0 for k in UNIT_KINDS)
    assert dev.unit("attn").fwd_time == pytest.approx(1.0 * 0.625 / 2 + 0.5)
    assert dev.unit("mlp").fwd_time == pytest.approx(2.0 * 0.625 / 2)
    assert dev.layer_recompute_time == pytest.approx(2.0 * (0.75 + 0.25 / 2) / 2)
    with pytest.raises(PlanError, match="not divisible by data parallelism 3"):
        mesh_profile(prof, MeshLayout(3, 1), splits, {}, weights)


@pytest.mark.parametrize("name,sp", [("llama2-13b", False), ("gpt3-13b", False), ("llama2-13b", True)])
def test_the_sweeps_tp_units_are_the_planners_division(name, sp):
    """One description: the sweep's units at TP 2 are its one-GPU units divided by
    mesh_costs as the planner divides a profile (unit_splits from the same op list)."""
    cfg = models.get_config(name)
    one = analytic_units(cfg, 2048, 1, "cudnn", "cmb", 1, False, HW)
    two = analytic_units(cfg, 2048, 1, "cudnn", "cmb", 2, sp, HW)
    splits = unit_splits(cfg, 2048, 1, "cudnn", HW.device)
    prof = layout_profile(cfg, 2048, 1, one, {k: 0.0 for k in UNIT_KINDS}, HW, "1/1/1/-")
    lay = MeshLayout(1, 2, sp)
    comms = {k: tp_collectives(k, cfg, 2048.0, lay, HW) for k in UNIT_KINDS}
    dev = mesh_profile(prof, lay, splits, comms, {k: 0.0 for k in UNIT_KINDS})
    for kind in UNIT_KINDS:
        want, got = two[kind].profile(), dev.unit(kind)
        for field in ("fwd_time", "bwd_time", "input_bytes", "full_recompute"):
            assert getattr(got, field) == pytest.approx(getattr(want, field), rel=1e-12), (kind, field)
        for (n, a), (m, b) in zip(got.ops, want.ops):
            assert n == m and a.fwd_time == pytest.approx(b.fwd_time, rel=1e-12, abs=1e-18)
            assert a.act_bytes == pytest.approx(b.act_bytes, rel=1e-12)
        assert got.kept_bytes({FULL}) == pytest.approx(want.kept_bytes({FULL}))


def test_weights_per_gpu_follow_the_registry():
    cfg = models.get_config("llama2-13b")
    for t in (1, 2, 8):
        n, rep = unit_param_count(cfg, "mlp"), replicated_unit_params(cfg, "mlp")
        assert params_per_gpu(["mlp"], cfg, t) == rep + (n - rep) / t
    assert params_per_gpu(["embed"], cfg, 8) == unit_param_count(cfg, "embed")
    assert math.isclose(params_per_gpu(["head"], cfg, 2), cfg.hidden + cfg.hidden * cfg.vocab_size / 2)


def _walked_sync_end(timeline, syncs, overlap_backward):
    """The hand walk gradient_sync_end was before its devices became lanes of the list
    scheduler (schedules.scheduling.list_schedule.lane_run): the reference it must match."""
    end = worst = 0.0
    by_device = {}
    for s, sync in enumerate(syncs):
        ops = timeline.stage_ops(s)
        last = max((o for o in ops if o.kind.value in ("B", "W")), key=lambda o: o.end)
        first = min((o for o in ops if o.kind.value == "F"), key=lambda o: o.start)
        hidden = last.end - last.start if overlap_backward else 0.0
        exposed = max(0.0, sync.grads - hidden) + max(0.0, sync.gather - (first.end - first.start))
        by_device.setdefault(timeline.device_of(s), []).append((last.end, exposed + sync.after))
        worst = max(worst, exposed)
    for work in by_device.values():
        t = 0.0
        for ready, seconds in sorted(work):
            t = max(t, ready) + seconds
        end = max(end, t)
    return end, worst


@settings(max_examples=examples(40), deadline=None, derandomize=True, database=None)
@given(st.sampled_from(["1f1b", "interleaved", "zb-h1", "gpipe", "zb-v"]), st.integers(2, 4), st.integers(1, 3),
       st.data(), st.booleans())
def test_sync_lanes_match_the_walk_they_replaced(name, p, rounds, data, overlap):
    """Stages alone on a device and chunks sharing one, collectives hidden, exposed or
    queued behind another stage's: the same ends, bit for bit."""
    chunks = 2 if name in ("interleaved", "zb-v") else 1
    sched = generate(name, p, p * rounds, **({"virtual_stages": 2} if name == "interleaved" else {}))
    n = sched.num_stages
    seconds = st.sampled_from([0.0, 0.3, 1.0, 2.5, 7.0])
    costs = StageCosts(fwd=tuple(data.draw(st.sampled_from([0.5, 1.0, 1.5])) for _ in range(n)),
                       bwd=tuple(data.draw(st.sampled_from([1.0, 2.0, 3.5])) for _ in range(n)))
    syncs = [StageSync(data.draw(seconds), data.draw(seconds), data.draw(st.sampled_from([0.0, 0.25])))
             for _ in range(n)]
    tl = simulate(sched, costs)
    assert sched.num_stages == p * chunks
    assert gradient_sync_end(tl, syncs, overlap) == _walked_sync_end(tl, syncs, overlap)
