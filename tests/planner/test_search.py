"""planner.search's pieces: the recompute names a plan writes, the swap grid and the
in-flight caps the search walks, warm-up counts, the ranking of evaluations, and a
configuration's schedule built from its own rows as from its generator. (The
search's figures against the one memory fold: test_memory_figures.py; its plans:
test_plan.py, test_baselines.py.)"""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from planner.profile import FULL, LAYER
from planner.search import (BETA_GRID, MIGRATION_FRACTIONS, Config, build_schedule, cap_options, rank,
                            recompute_names, swap_options, warmups, warmups_of_rows)
from schedules import generate

OPS = ("attn_norm", "attn_qkv", "mlp_up", "mlp_act")


def test_recompute_names_keep_presets_whole_and_ops_in_forward_order():
    assert recompute_names(frozenset({FULL, "mlp_up"}), OPS) == (FULL,)
    assert recompute_names(frozenset({LAYER}), OPS) == (LAYER,)
    assert recompute_names(frozenset({"mlp_act", "attn_norm"}), OPS) == ("attn_norm", "mlp_act")
    assert recompute_names(frozenset({"zz", "mlp_up", "aa"}), OPS) == ("mlp_up", "aa", "zz")
    assert recompute_names(frozenset(), OPS) == ()


@pytest.mark.parametrize("k, p, warm", [(0, 4, (4, 3, 2, 1)), (1, 8, (8,) * 8), (2, 4, (4, 3, 2, 1)),
                                        (3, 16, (16,) * 16)])
def test_the_swap_grid_is_no_swap_then_lambda_by_beta(k, p, warm):
    top = min(warm[k] - 1, max(2, p - k - 2))
    want = [(None, 0.0)] + [(lam, b) for lam in range(0 if k > 0 else 1, top + 1) for b in BETA_GRID]
    assert swap_options(k, p, warm, True) == want


def test_no_swap_grid_without_swapping_or_an_adjusted_stage():
    assert swap_options(2, 8, (8,) * 8, False) == [(None, 0.0)]
    assert swap_options(-1, 8, (8,) * 8, True) == [(None, 0.0)]


@pytest.mark.parametrize("p, m, k", [(4, 8, 0), (4, 8, 2), (8, 32, 3), (8, 4, 5)])
def test_cap_options_hold_the_generator_the_migrations_and_both_baselines(p, m, k):
    opts = cap_options(p, m, k)
    assert opts[0] is None and opts[-2:] == ["strawman", "recomp"]
    caps = opts[1:-2]
    assert len(caps) == len(set(caps)) <= len(MIGRATION_FRACTIONS)
    assert caps[0] == tuple(min(m, p - s) for s in range(p))            # j = 0: relaxation alone
    for c in caps:
        assert all(c[s] == min(m, p - s) for s in range(k + 1, p))      # unadjusted stages keep 1F1B's
        assert all(min(m, p - s) <= c[s] <= m for s in range(k + 1))


def test_warmups_are_the_forwards_before_the_first_backward():
    one = generate("1f1b", 4, 8)
    assert warmups(one) == (4, 3, 2, 1)
    assert warmups_of_rows(spec.actions for spec in generate("gpipe", 3, 5).stages) == (5, 5, 5)


def _ev(makespan, peaks, swap_blocks=(0, 0), beta=0.0):
    return SimpleNamespace(makespan=makespan, peaks=peaks, config=SimpleNamespace(swap_blocks=swap_blocks, beta=beta))


def test_rank_is_time_then_host_traffic_then_peak():
    fast, slow = _ev(10.0, (5.0,)), _ev(10.5, (1.0,))
    assert sorted([slow, fast], key=rank)[0] is fast
    swapping, plain = _ev(10.0, (1.0,), (2, 1), 0.5), _ev(10.0 * (1 + 1e-12), (9.0,))
    assert sorted([swapping, plain], key=rank)[0] is plain                # a tie in time: less traffic
    low, high = _ev(10.0, (3.0, 4.0)), _ev(10.0, (2.0, 5.0))
    assert sorted([high, low], key=rank)[0] is low


def test_a_config_built_from_its_rows_is_the_generators_schedule():
    p, m = 4, 8
    sets = (frozenset({"mlp_act"}), frozenset(), frozenset({FULL}), frozenset())
    gen = Config("1f1b", ((0,),) * p, (0,), sets, (0,) * p)
    base = generate("1f1b", p, m)
    own = Config("1f1b", ((0,),) * p, (0,), sets, (0,) * p, order=tuple(spec.actions for spec in base.stages))
    a, b = build_schedule(gen, m, OPS), build_schedule(own, m, OPS)
    assert [s.actions for s in a.stages] == [s.actions for s in b.stages]
    assert [s.recompute for s in a.stages] == [("mlp_act",), (), (FULL,), ()]
