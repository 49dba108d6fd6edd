"""The sweep's trends against the layouts paper (analytic costs; the measured file is
never read here), and the arithmetic of its rows."""
from collections import defaultdict

import pytest

import models
from planner.layouts import Hardware, LayoutGrid, run_sweep

POLICIES = ("none", "cmb", "full")   # kept short: the trends only need ordered choices


def sweep(model, seq, global_batch, **grid):
    grid = dict(dict(policies=POLICIES, attentions=("cudnn",)), **grid)
    return run_sweep(models.get_config(model), seq, LayoutGrid(gpus=64, global_batch=global_batch, **grid),
                     measured=None)


@pytest.fixture(scope="module")
def r13_2k():
    return sweep("llama2-13b", 2048, 2048)


def test_top_row_13b_2k_is_mbs1_no_recompute_pipeline_only(r13_2k):
    best = r13_2k.fitting[0].layout
    assert (best.micro_batch, best.tp, best.policy) == (1, 1, "none")
    assert 0.5 < r13_2k.fitting[0].mfu < 0.8


def test_no_recompute_is_best_whenever_it_fits(r13_2k):
    groups = defaultdict(dict)
    for x in r13_2k.fitting:
        lo = x.layout
        groups[lo.micro_batch, lo.tp, lo.pp, lo.sp, lo.attention][lo.policy] = x.mfu
    checked = 0
    for mfus in groups.values():
        if "none" in mfus:
            checked += 1
            assert all(mfus["none"] >= v for v in mfus.values())
    assert checked > 10


def test_micro_batch_1_is_best_at_fixed_global_batch(r13_2k):
    best = {}
    for x in r13_2k.fitting:
        best.setdefault(x.layout.micro_batch, x.mfu)
    assert best[1] >= best[2] and best[1] > best[4]


def test_pipeline_before_tensor_parallelism_at_13b(r13_2k):
    best_tp1 = max(x.mfu for x in r13_2k.fitting if x.layout.tp == 1)
    best_tp2 = max(x.mfu for x in r13_2k.fitting if x.layout.tp == 2)
    assert best_tp1 > best_tp2
    # the same comparison at equal model parallelism (TP*PP = 2 or 4)
    for mp in (2, 4):
        pp_only = max(x.mfu for x in r13_2k.fitting if x.layout.tp == 1 and x.layout.pp == mp)
        with_tp = max(x.mfu for x in r13_2k.fitting if x.layout.tp == 2 and x.layout.pp == mp // 2)
        assert pp_only > with_tp


def test_bubble_grows_with_pp_and_shrinks_with_more_micro_batches(r13_2k):
    rows = {(x.layout.micro_batch, x.layout.tp, x.layout.pp, x.layout.sp, x.layout.policy): x
            for x in r13_2k.fitting}
    bubbles = [rows[1, 1, pp, False, "none"].time.bubble_fraction for pp in (2, 4, 8)]
    assert bubbles == sorted(bubbles) and bubbles[0] > 0
    assert rows[1, 1, 1, False, "none"].time.bubble_fraction == 0.0
    # mbs 4 at PP 4 has 4x fewer micro-batches than mbs 1: a bigger bubble
    assert rows[4, 1, 4, False, "cmb"].time.bubble_fraction > rows[1, 1, 4, False, "cmb"].time.bubble_fraction


def test_recompute_costs_time_on_the_simulated_pipeline(r13_2k):
    rows = {(x.layout.micro_batch, x.layout.tp, x.layout.pp, x.layout.sp, x.layout.policy): x
            for x in r13_2k.fitting}
    none, full = rows[1, 1, 4, False, "none"], rows[1, 1, 4, False, "full"]
    assert none.time.recompute == 0.0 and full.time.recompute > 0.0
    assert full.time.pipeline > none.time.pipeline * 1.1
    assert full.memory.total < none.memory.total


def test_row_arithmetic(r13_2k):
    hw = Hardware()
    for x in r13_2k.fitting[:5]:
        lo, t = x.layout, x.time
        tokens = 2048 * 2048
        assert lo.num_microbatches * lo.micro_batch * lo.dp == 2048
        assert x.tokens_per_second == pytest.approx(tokens / t.total)
        assert x.mfu == pytest.approx(tokens / t.total * r13_2k.flops_per_token / (64 * hw.device.peak_flops))
        assert t.total >= t.pipeline
        assert x.memory.total <= hw.usable_memory
    assert r13_2k.flops_per_token == pytest.approx(
        6 * 13015864320 - 6 * 32000 * 5120 + 12 * 40 * 40 * 128 * 2048)
    # non-fitting layouts are kept (ranked after) with their memory, but no time
    assert not r13_2k.results[-1].fits and r13_2k.results[-1].time is None


def test_13b_8k_needs_tensor_and_sequence_parallelism():
    """At 8k, 1F1B keeps L layers of activations on stage 0 whatever PP is, so TP with
    SP (which divides them) wins, as in the paper's 13B 8k row (1/2/2/on)."""
    r = sweep("llama2-13b", 8192, 512)
    best = r.fitting[0].layout
    assert best.tp == 2 and best.sp
    assert max(x.mfu for x in r.fitting if x.layout.sp) > max(
        x.mfu for x in r.fitting if x.layout.tp == 2 and not x.layout.sp)


def test_30b_2k_matches_the_paper_layout():
    """The paper's best 30B 2k layout is 1/1/4/off without checkpointing."""
    r = sweep("llama-30b", 2048, 2048, micro_batches=(1, 2))
    best = r.fitting[0].layout
    assert (best.micro_batch, best.tp, best.pp, best.policy) == (1, 1, 4, "none")


def test_more_memory_admits_less_parallelism():
    small = run_sweep(models.get_config("llama2-13b"), 2048,
                      LayoutGrid(gpus=64, global_batch=256, policies=("none",), attentions=("cudnn",),
                                 pps=(1, 2), micro_batches=(1,)),
                      Hardware(gpu_memory=40 * 2 ** 30), measured=None)
    big = run_sweep(models.get_config("llama2-13b"), 2048,
                    LayoutGrid(gpus=64, global_batch=256, policies=("none",), attentions=("cudnn",),
                               pps=(1, 2), micro_batches=(1,)),
                    Hardware(gpu_memory=141e9), measured=None)
    assert len(small.fitting) < len(big.fitting)
    assert {x.layout.pp for x in big.fitting} == {1, 2}


def test_rows_say_whether_the_registry_can_shard_them():
    """A row is runnable (`obscura train --layout`) when models.tensor_parallel can
    shard the model over its TP: here the head's vocabulary (1001) cannot split in 2."""
    cfg = models.get_config("llama2-tiny").replace(vocab_size=1001)
    r = run_sweep(cfg, 64, LayoutGrid(gpus=8, global_batch=16, micro_batches=(1,), pps=(1, 2), tps=(1, 2),
                                      policies=("none",), attentions=("xla",), sequence_parallel=(False,)),
                  measured=None)
    assert {x.layout.tp for x in r.results if x.runnable} == {1}
    bad = [x for x in r.results if not x.runnable]
    assert bad and all(x.layout.tp == 2 and "head/w_out/kernel dim 1 (1001)" in x.not_runnable for x in bad)
    rows = r.to_json()["layouts"]
    assert [row["rank"] for row in rows] == [i if row["fits"] else None for i, row in enumerate(rows, 1)]
    assert all(row["runnable"] == (row["tp"] == 1) for row in rows)
