"""planner.memory_balance: boundary runs moved for memory, judged by the simulator;
on the committed Llama-2-13B profile a V schedule holds no more than 1F1B, as the
zero-bubble papers state, once its units leave the device that holds both ends."""
import math
from collections import Counter
from functools import lru_cache
from pathlib import Path

import pytest

from planner.families import BY_NAME, chunk_partition, search_family
from planner.family_search import evaluate, order_of, unlimited
from planner.memory_balance import BALANCE_REACH, balance_memory, balanced, shifted
from planner.profile import derive_profile, load_profile
from planner.search import Setting
from tests.planner.synthetic import synthetic_profile

ROOT = Path(__file__).resolve().parents[2]


@lru_cache(maxsize=None)
def llama2_13b():
    return derive_profile(load_profile(ROOT / "results/h200/profile_llama2-13b.json"), num_layers=40)


def test_a_shift_moves_one_cut_and_never_empties_a_chunk():
    part = ((0, 3), (3, 5), (5, 9))
    assert shifted(part, 0, -1) == ((0, 2), (2, 5), (5, 9))
    assert shifted(part, 1, 1) == ((0, 3), (3, 6), (6, 9))
    assert shifted(((0, 1), (1, 4)), 0, -1) is None
    assert shifted(((0, 3), (3, 4)), 0, 1) is None


def _one_f_one_b(prof, p, m):
    free = Setting(prof, m, math.inf)
    return unlimited(order_of(free, "1f1b", p, chunk_partition(prof, p, 1), 1))


@pytest.mark.parametrize("p", [4, 8])
def test_zb_v_holds_at_most_1f1b_on_the_llama2_13b_profile(p):
    """Nothing recomputed, m = 2p: 1F1B on its even partition sets the target; ZB-V's
    even partition is over it (device 0 holds the embedding and the head), a balanced
    one is not, and ZB-V is still the faster schedule."""
    prof, m = llama2_13b(), 2 * p
    base = _one_f_one_b(prof, p, m)
    target = max(base.peaks)
    setting = Setting(prof, m, target)
    order = order_of(setting, "zb-v", p, chunk_partition(prof, p, 2), 2)
    even = unlimited(order)
    assert max(even.peaks) > target
    nothing = (frozenset(),) * len(order.partition)
    found = balance_memory(lambda part: evaluate(setting, even.schedule, part, nothing, 2), order.partition,
                           target, even.schedule.stage_to_device)
    assert max(found.evaluation.peaks) <= target
    assert found.evaluation.makespan < base.makespan
    assert found.partition != order.partition and found.moves
    assert found.partition[0][0] == 0 and found.partition[-1][1] == prof.num_units
    assert all(a < b for a, b in found.partition)
    assert all(found.partition[k][1] == found.partition[k + 1][0] for k in range(len(found.partition) - 1))


def test_balancing_stops_where_no_move_helps():
    """A target nothing reaches: the moves end, each lowering the peaks read largest first."""
    prof, p, m = llama2_13b(), 4, 8
    setting = Setting(prof, m, math.inf)
    order = order_of(setting, "1f1b", p, chunk_partition(prof, p, 1), 1)
    even = unlimited(order)
    nothing = (frozenset(),) * p
    judged = Counter()

    def judge(part):
        judged[part] += 1
        return evaluate(setting, even.schedule, part, nothing)
    found = balance_memory(judge, order.partition, 0.0, even.schedule.stage_to_device)
    assert sorted(found.evaluation.peaks, reverse=True) < sorted(even.peaks, reverse=True)
    assert max(found.evaluation.peaks) > 0
    assert len(found.moves) > 1 and set(judged.values()) == {1}    # later moves meet earlier partitions: simulated once


def test_the_family_search_offers_the_balanced_partition_only_within_reach():
    """`balanced` is a candidate of the family's result where the even partition is a
    little over the limit with nothing recomputed, and is nothing where it fits or is
    far over."""
    prof, p, m = llama2_13b(), 4, 8
    target = max(_one_f_one_b(prof, p, m).peaks)
    setting = Setting(prof, m, target)
    order = order_of(setting, "zb-v", p, chunk_partition(prof, p, 2), 2)
    fast = unlimited(order)
    assert target < max(fast.peaks) <= target * (1 + BALANCE_REACH)
    moved = balanced(order, fast)
    assert moved is not None and moved.fits and not any(moved.config.recompute)
    result = search_family(setting, BY_NAME["zb-v"], p, per_op=False)
    assert any(c.variant == "balanced" and c.evaluation.makespan == moved.makespan for c in result.candidates)
    assert result.best.evaluation.makespan <= moved.makespan
    roomy = Setting(prof, m, max(fast.peaks))
    assert balanced(order_of(roomy, "zb-v", p, order.partition, 2), unlimited(order_of(roomy, "zb-v", p,
                                                                                     order.partition, 2))) is None
    tight = Setting(prof, m, max(fast.peaks) / (1 + 2 * BALANCE_REACH))
    tight_order = order_of(tight, "zb-v", p, order.partition, 2)
    assert balanced(tight_order, unlimited(tight_order)) is None


def test_a_balanced_plan_fits_where_the_even_one_needs_recompute():
    """On a synthetic profile whose recompute is dear, at a limit the even partition
    misses by a little, the family's best plan is the balanced one, nothing recomputed."""
    prof = synthetic_profile(num_layers=8)
    p, m = 2, 4
    free = Setting(prof, m, math.inf)
    even = unlimited(order_of(free, "zb-v", p, chunk_partition(prof, p, 2), 2))
    limit = max(even.peaks) * 0.97
    result = search_family(Setting(prof, m, limit), BY_NAME["zb-v"], p)
    assert result.best is not None and max(result.best.evaluation.peaks) <= limit
    variants = {c.variant for c in result.candidates}
    assert "balanced" in variants
