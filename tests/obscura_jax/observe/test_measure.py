"""Costs measured on the run's own devices (obscura_jax.observe.measure): one StageCosts from
standalone timings of each stage program, with the adjusted stages' recompute split
out, swap and p2p bandwidths timed, and weights counted from the live state."""
import math

import jax
import pytest

import models
import schedules
from models.units import tree_bytes
from obscura_jax.run.data import BatchShape
from obscura_jax.runtime.pipeline import build_pipeline
from obscura_jax.runtime.executor import make_optimizer
from obscura_jax.observe.measure import measure_costs, time_unit_program
from obscura_jax.runtime.placement import place_stages

CFG = models.get_config("llama2-tiny")


@pytest.fixture(scope="module")
def measured():
    """Stage 0 adjusted (full recompute) and swapping half its blocks; stage 1 plain."""
    sched = schedules.generate("obscura", 2, 4, adjusted=0, swap_blocks=1, swap_fraction=0.5)
    pipe = build_pipeline(CFG, sched, models.even_partition(CFG.num_units, 2), "none", place_stages(2, "cpu", 2),
                          BatchShape(4, 2, 16), make_optimizer("sgd", 0.1), schedules.issue_order(sched))
    states = pipe.init_state(0)
    return pipe, states, measure_costs(pipe, states, "none", reps=1)


def test_every_stage_gets_positive_times_and_its_own_bytes(measured):
    pipe, states, mc = measured
    c = mc.costs
    assert c.num_stages == 2 and all(t > 0 for t in c.fwd + c.bwd)
    for s, st in enumerate(states):
        assert c.weight_bytes[s] == tree_bytes(st.params) + tree_bytes(st.grads) + tree_bytes(st.opt_state)
        assert c.act_bytes_recompute[s] == pipe.programs[s].residual_bytes
    assert c.boundary_bytes == (pipe.programs[0].output_bytes, 0)


def test_the_adjusted_stage_splits_out_its_recompute(measured):
    """bwd is the base policy's backward; the adjusted program's extra is recompute,
    and its residuals are the smaller ones."""
    _, _, mc = measured
    c = mc.costs
    assert c.bwd[0] == mc.base_bwd[0] and c.recompute[0] == pytest.approx(max(mc.adjusted_bwd[0] - c.bwd[0], 0))
    assert c.act_bytes[0] > c.act_bytes_recompute[0]
    assert c.recompute[1] == 0.0 and c.act_bytes[1] == c.act_bytes_recompute[1]


def test_transfers_are_timed(measured):
    _, _, mc = measured
    assert 0 < mc.costs.p2p_bandwidth < math.inf              # two devices: a real copy
    assert 0 < mc.host_bandwidth_out < math.inf and 0 < mc.host_bandwidth_in < math.inf
    assert mc.costs.host_bandwidth == min(mc.host_bandwidth_out, mc.host_bandwidth_in)
    assert set(mc.to_json()) >= {"fwd", "bwd", "recompute", "host_bandwidth_out", "host_bandwidth_in"}


def test_time_unit_program_is_the_engines_program_for_one_unit():
    device = jax.devices()[0]
    params = jax.device_put(models.init_params(CFG, 0, (1, 2)), device)
    x = jax.device_put(jax.numpy.ones((2, 16, CFG.hidden), CFG.compute_dtype), device)
    t = time_unit_program(CFG, (1, 2), models.resolve_policy("none", CFG.family), device, params, x, None, 1)
    assert t.fwd > 0 and t.bwd > 0
    assert t.residual_bytes == models.unit_residual_bytes(CFG, "attn", "none", 16, 2)


def test_gpus_are_timed_after_sustained_load_with_few_runs_in_flight():
    """The H200's power cap: a short burst runs at boost clock, the pipeline does not."""
    from obscura_jax.observe.measure import CostTiming

    class Device:
        def __init__(self, platform):
            self.platform = platform
    gpu, cpu = CostTiming.for_device(Device("gpu"), 3), CostTiming.for_device(Device("cpu"), 3)
    assert gpu.sustain_seconds >= 2.0 and gpu.settle_seconds > 0 and gpu.max_calls <= 8
    assert cpu.sustain_seconds == 0.0 and cpu.samples == gpu.samples == 3
    calls = []
    t = CostTiming(2, sample_seconds=1.0, max_calls=3).time(lambda: calls.append(jax.numpy.ones(2)) or calls[-1],
                                                          first=True)
    assert t > 0 and len(calls) == 1 + 1 + 2 * 3    # warm-up, sizing call, 2 samples capped at 3 runs


@pytest.mark.parametrize("platform", ["cpu", "gpu"])
def test_in_lockstep_every_process_makes_the_same_calls_whatever_its_speed(platform, monkeypatch):
    """Stages whose mesh spans processes hold collectives across them: a process that
    made more timing calls than its peer would wait forever (the 2-of-28 hangs of
    --data-across-processes). A fast and a slow process (a fake clock) make as many."""
    import time as time_module

    from obscura_jax.observe import measure
    class Device:
        def __init__(self, p):
            self.platform = p

    def calls_made(timing, seconds_per_call: float, firsts=(True,)) -> int:
        """How many calls `timing` makes of a program taking `seconds_per_call` (fake clock)."""
        clock, calls = [0.0], []
        monkeypatch.setattr(time_module, "perf_counter", lambda: clock[0])

        def call():
            clock[0] += seconds_per_call
            calls.append(1)
            return jax.numpy.ones(2)
        for first in firsts:
            timing.spread(call, first=first)
        return len(calls)
    lockstep = measure.CostTiming.for_device(Device(platform), 3).in_lockstep()
    counts = [calls_made(lockstep, t, (True, False)) for t in (1e-5, 0.2)]
    assert counts[0] == counts[1] == 2 * (1 + 3)     # each spread: a warm-up, then 3 one-call samples
    # without lockstep the counts follow the clock (what made the processes disagree)
    free = measure.CostTiming.for_device(Device("cpu"), 3)
    assert calls_made(free, 1e-5) != calls_made(free, 0.2)


@pytest.mark.parametrize("weight_grad", ["hold", "rederive"])
def test_ledger_costs_and_programs_count_the_same_w_block(weight_grad):
    """A zero-bubble run: the measured costs' weight_grad_held is each program's held
    block, and the runtime's ledger peaks are the memory fold's (schedules.memory) on
    the issue clock under those costs: I leaves exactly what the program holds."""
    import numpy as np

    from obscura_jax.runtime.weight_grad import WeightGrad
    from schedules.simulator import stage_memory
    from schedules.timeline import OpRecord, Timeline

    sched = schedules.generate("zb-h1", 2, 4)
    order = schedules.issue_order(sched)
    pipe = build_pipeline(CFG, sched, models.even_partition(CFG.num_units, 2), "none", place_stages(2, "cpu", 2),
                          BatchShape(4, 2, 16), make_optimizer("sgd", 0.1), order,
                          weight_grad=WeightGrad(weight_grad, "at-once"))
    states = pipe.init_state(0)
    costs = measure_costs(pipe, states, "none", reps=1).costs
    held = tuple(p.weight_grad_held_bytes for p in pipe.programs)
    assert costs.weight_grad_held == held and all(h > 0 for h in held)
    rng = np.random.default_rng(0)
    tok, tgt = (rng.integers(0, CFG.vocab_size, (4, 2, 16)).astype(np.int32) for _ in range(2))
    ledger = pipe.executor.run_actions(states, tok, tgt, track_memory=True).ledger
    clock = Timeline.from_ops(2, [OpRecord.of(a, 2 * i, 2 * i + 1) for i, a in enumerate(order)],
                              memory=stage_memory(sched, costs))
    assert ledger.live == [0, 0]
    assert ledger.peak == [st.peak_held_bytes for st in clock.stages]


def test_a_split_stage_on_the_base_policy_is_timed_as_it_runs_without_compiling_b():
    """obscura-zb-h1 with stage 0 adjusted: stage 1 runs I and W on the base policy,
    so its backward is timed as I + W and its B is never compiled; the adjusted
    stage still times its B against the base policy's (its recompute is the
    difference)."""
    sched = schedules.generate("obscura-zb-h1", 2, 4, adjusted=0)
    assert [s.adjusted for s in sched.stages] == [True, False]
    assert all(any(a.kind is schedules.Kind.W for a in spec.actions) for spec in sched.stages)
    pipe = build_pipeline(CFG, sched, models.even_partition(CFG.num_units, 2), "none", place_stages(2, "cpu", 2),
                          BatchShape(4, 2, 16), make_optimizer("sgd", 0.1), schedules.issue_order(sched))
    mc = measure_costs(pipe, pipe.init_state(0), "none", reps=1)
    c = mc.costs
    assert pipe.programs[1]._bwd is None           # never compiled: the schedule never runs it
    assert c.bwd[1] == pytest.approx(c.input_grad[1] + c.weight_grad[1]) and c.recompute[1] == 0.0
    assert pipe.programs[0]._bwd is not None and c.bwd[0] == mc.base_bwd[0]
    assert c.recompute[0] == pytest.approx(max(mc.adjusted_bwd[0] - mc.base_bwd[0], 0.0))
