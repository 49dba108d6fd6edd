"""Layout enumeration: the grid, divisibility rules and the reasons for skipping."""
import pytest

import models
from planner.layouts import LayoutGrid, enumerate_layouts
from planner.layouts.space import explain_empty


@pytest.fixture(scope="module")
def cfg13():
    return models.get_config("llama2-13b")


@pytest.fixture(scope="module")
def cfg30():
    return models.get_config("llama-30b")


def test_default_grid_on_64_gpus(cfg13):
    layouts, skipped = enumerate_layouts(LayoutGrid(gpus=64, global_batch=2048), cfg13)
    # 3 mbs x (4 PP at TP 1 + 4 PP x SP on/off at TP 2) x 5 policies x 2 attentions
    assert len(layouts) == 3 * (4 + 8) * 5 * 2 == 360
    assert skipped == []
    for lo in layouts:
        assert lo.dp * lo.pp * lo.tp == 64
        assert lo.num_microbatches * lo.dp * lo.micro_batch == 2048
        assert lo.tp > 1 or not lo.sp
    assert len(set(layouts)) == len(layouts)
    lo = next(l for l in layouts if (l.micro_batch, l.tp, l.pp, l.sp) == (1, 2, 2, True))
    assert lo.label == "1/2/2/on" and lo.dp == 16 and lo.num_microbatches == 128
    lo = next(l for l in layouts if (l.micro_batch, l.tp, l.pp) == (4, 1, 8))
    assert lo.label == "4/1/8/-" and lo.dp == 8 and lo.num_microbatches == 64


def test_divisibility_skips_with_reasons(cfg13):
    layouts, skipped = enumerate_layouts(
        LayoutGrid(gpus=12, global_batch=24, micro_batches=(1, 4)), cfg13)
    reasons = dict(skipped)
    assert "12 GPUs not divisible by PP*TP = 8" in reasons["mbs 1 TP 1 PP 8"]
    assert "not divisible by DP*mbs = 48" in reasons["mbs 4 TP 1 PP 1"]
    assert {(l.tp, l.pp) for l in layouts if l.micro_batch == 1} == {(1, 1), (1, 2), (1, 4), (2, 1), (2, 2)}
    for lo in layouts:
        assert 12 % (lo.tp * lo.pp) == 0 and 24 % (lo.dp * lo.micro_batch) == 0


def test_heads_and_node_limits(cfg30):
    layouts, skipped = enumerate_layouts(
        LayoutGrid(gpus=64, global_batch=512, tps=(1, 2, 4, 8, 16)), cfg30, gpus_per_node=8)
    reasons = dict(skipped)
    # LLaMA-30B has 52 heads: TP 8 is impossible (the layouts paper's remark)
    assert "heads 52 not divisible by TP 8" in reasons["mbs 1 TP 8 PP 1"]
    assert "spans more than a node" in reasons["mbs 1 TP 16 PP 1"]
    assert {l.tp for l in layouts} == {1, 2, 4}


def test_empty_grid_is_explained(cfg13):
    grid = LayoutGrid(gpus=6, global_batch=64, pps=(4, 8), tps=(1,))
    layouts, skipped = enumerate_layouts(grid, cfg13)
    assert layouts == []
    msg = explain_empty(grid, skipped)
    assert "6 GPUs are not divisible by PP*TP" in msg and "\n" not in msg
    grid = LayoutGrid(gpus=64, global_batch=2)
    layouts, skipped = enumerate_layouts(grid, cfg13)
    assert layouts == [] and "global batch 2" in explain_empty(grid, skipped)


@pytest.mark.parametrize("kwargs, text", [
    (dict(gpus=0, global_batch=8), "gpus must be a positive integer"),
    (dict(gpus=8, global_batch=-1), "global batch must be a positive integer"),
    (dict(gpus=8, global_batch=8, micro_batches=()), "micro-batch list is empty"),
    (dict(gpus=8, global_batch=8, pps=(0,)), "PP values must be positive"),
    (dict(gpus=8, global_batch=8, policies=("none", "half")), "unknown policy 'half'"),
    (dict(gpus=8, global_batch=8, attentions=("flash3",)), "unknown attention 'flash3'"),
])
def test_grid_validation(kwargs, text):
    with pytest.raises(ValueError, match=text):
        LayoutGrid(**kwargs)
