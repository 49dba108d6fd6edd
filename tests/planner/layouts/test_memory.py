"""Memory per GPU of a layout: weights/grads/optimizer sharding, 1F1B in-flight
activations, and monotonicity (more PP / TP / SP / recompute -> less per GPU)."""
import itertools

import pytest

import models
from models.units import unit_param_count
from planner.layouts import TrainingState
from planner.layouts.memory import params_per_gpu, replicated_params, sharded_weight_bytes, stage_kinds, stage_memory
from planner.layouts.timing import iteration_time
from schedules.sizes import GiB
from tests.planner.layouts.helpers import HW, pipeline
POLICY_ORDER = ("none", "selective", "cmb", "mlp", "full")   # kept bytes decrease


@pytest.fixture(scope="module")
def shape13():
    return models.get_config("llama2-13b")


def worst(shape, seq, mbs, tp, pp, sp, policy, attention, gpus=64, global_batch=2048,
          state=TrainingState()):
    dp = gpus // (tp * pp)
    m = global_batch // (dp * mbs)
    costs, _, units = pipeline(shape, seq, mbs, tp, pp, sp, policy, attention, dp, m, state)
    mem = stage_memory(costs, stage_kinds(shape, pp), {k: u.transient_bytes for k, u in units.items()}, m)
    return max(s.total for s in mem), mem


def test_weights_shard_over_tp_pp_and_zero1(shape13):
    n = models.count_params(shape13)
    all_kinds = sum(stage_kinds(shape13, 1), [])
    assert params_per_gpu(all_kinds, shape13, 1) == n
    # TP splits everything the registry shards: not the norms (and GPT biases), nor the
    # embedding table (models/ops.py registers none for it; the runtime replicates it)
    replicated = sum(replicated_params(k, shape13) for k in all_kinds)
    assert replicated == unit_param_count(shape13, "embed") + 81 * shape13.hidden
    assert params_per_gpu(all_kinds, shape13, 2) == pytest.approx(n / 2 + replicated / 2)
    # bf16 state, ZeRO-1 over 64: 2 + 2 + 12/64 bytes per param
    assert sharded_weight_bytes(all_kinds, shape13, 1, 64, TrainingState("bf16", True)) == pytest.approx(
        n * (4 + 12 / 64))
    assert sharded_weight_bytes(all_kinds, shape13, 1, 64, TrainingState("bf16", False)) == pytest.approx(n * 16)
    assert sharded_weight_bytes(all_kinds, shape13, 1, 64, TrainingState("fp32", True)) == pytest.approx(
        n * (8 + 8 / 64))
    per_stage = [params_per_gpu(k, shape13, 1) for k in stage_kinds(shape13, 8)]
    assert sum(per_stage) == n and max(per_stage) < n / 8 * 1.3


def test_inflight_follows_1f1b(shape13):
    _, mem = worst(shape13, 2048, 1, 1, 4, False, "none", "cudnn")
    assert [s.inflight for s in mem] == [4, 3, 2, 1]
    _, mem = worst(shape13, 2048, 1, 1, 8, False, "none", "cudnn", global_batch=16)  # m = 2
    assert [s.inflight for s in mem] == [2] * 7 + [1]


def test_inflight_and_kept_bytes_match_the_simulator(shape13):
    """The memory model's 1F1B accounting equals what schedules.simulate records."""
    for policy in ("none", "cmb"):
        costs, lo, units = pipeline(shape13, 2048, 1, 1, 4, False, policy, "cudnn", 16, 8, TrainingState())
        stages = stage_kinds(shape13, 4)
        mem = stage_memory(costs, stages, {k: u.transient_bytes for k, u in units.items()}, 8)
        _, timeline = iteration_time(costs, stages, lo, shape13, TrainingState(), HW)
        for s, st in enumerate(timeline.stages):
            # weights reach the memory model through the profile and planner.costs
            assert mem[s].weights == pytest.approx(sharded_weight_bytes(stages[s], shape13, 1, 16,
                                                                        TrainingState()))
            assert st.peak_inflight_microbatches == mem[s].inflight
            assert st.peak_activation_bytes == pytest.approx(mem[s].activations)


GRID = list(itertools.product((2048, 8192), (1, 2, 4), ("xla", "cudnn")))


@pytest.mark.parametrize("seq, mbs, attention", GRID)
def test_more_model_parallelism_and_recompute_never_need_more_memory(shape13, seq, mbs, attention):
    table = {}
    for tp, pp, policy in itertools.product((1, 2, 4), (1, 2, 4, 8), POLICY_ORDER):
        for sp in ((False, True) if tp > 1 else (False,)):
            table[tp, pp, sp, policy] = worst(shape13, seq, mbs, tp, pp, sp, policy, attention)[0]
    for (tp, pp, sp, policy), mem in table.items():
        if (tp, 2 * pp, sp, policy) in table:
            assert table[tp, 2 * pp, sp, policy] <= mem, ("PP", tp, pp, sp, policy)
        if (2 * tp, pp, sp, policy) in table:
            assert table[2 * tp, pp, sp, policy] < mem, ("TP", tp, pp, sp, policy)
        if sp is False and tp > 1:
            assert table[tp, pp, True, policy] < mem, ("SP", tp, pp, policy)
        i = POLICY_ORDER.index(policy)
        if i + 1 < len(POLICY_ORDER):
            assert table[tp, pp, sp, POLICY_ORDER[i + 1]] <= mem, ("policy", tp, pp, sp, policy)


def test_bigger_micro_batches_and_longer_sequences_need_more(shape13):
    for tp, pp, policy in itertools.product((1, 2), (1, 4), ("none", "full")):
        mems = [worst(shape13, 2048, b, tp, pp, False, policy, "cudnn")[0] for b in (1, 2, 4)]
        assert mems == sorted(mems) and mems[0] < mems[2]
        assert worst(shape13, 8192, 1, tp, pp, False, policy, "cudnn", global_batch=512)[0] > mems[0]


def test_13b_fits_the_paper_way(shape13):
    """Sanity against the layouts paper (80 GB A100s, bf16 + ZeRO-1): 13B at 2k fits
    with no model parallelism and no recompute at micro-batch 1 but not at 4."""
    usable = HW.usable_memory
    assert worst(shape13, 2048, 1, 1, 1, False, "none", "cudnn")[0] < usable
    assert worst(shape13, 2048, 4, 1, 1, False, "none", "cudnn")[0] > usable
    # without ZeRO-1 the 13B model's 16 B/param state alone exceeds 80 GiB
    assert worst(shape13, 2048, 1, 1, 1, False, "full", "cudnn",
                 state=TrainingState("bf16", zero1=False))[0] > 80 * GiB
