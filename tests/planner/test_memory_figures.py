"""Every memory figure the planner reads equals the one fold's (schedules.memory, over
the per-kind table's memory effects) on random profiles, partitions and schedules:
the planner's stage peaks, identify's 1F1B peak, the baselines' lower bound, the
layout sweep's blocks in flight, and the recompute IP's resident blocks of a
swapped order. (The cap search's count: tests/schedules/test_memory_fold.py; the
runtime ledger's: tests/obscura_jax/runtime/test_executor.py.)

identify's peak is a closed form (the paper's Step 1, plus the inbox): on the
committed profiles, drawn here, it is the fold's or one received gradient more
(whether the next gradient arrives while B still reads the last depends on the
durations, which a closed form does not see). On stages as uneven as the synthetic
profile's (an embedding stage next to whole layers) with m < p, the fold can see
more; the planner's own figures are the fold's (simulate_config)."""
import math
from functools import lru_cache
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import models
from planner.baselines import peak_lower_bound
from planner.costs import program_outputs, stage_costs, working_bytes
from planner.identify import stage_peak_1f1b
from planner.layouts.memory import inflight_1f1b
from planner.profile import FULL, derive_profile, load_profile
from planner.search import Config, Setting, base_order, resident_blocks, simulate_config, swap_options, \
    warmups_of_rows
from schedules import generate, simulate
from schedules.generators.common import warmup_count
from schedules.generators.swap import chain_swap_blocks
from schedules.memory import StageMemory, Uniform, order_memory
from tests.budget import examples
from tests.planner.synthetic import MB, synthetic_profile

SETTINGS = dict(deadline=None, derandomize=True, database=None, suppress_health_check=[HealthCheck.too_slow])
CMB = frozenset({"attn_norm", "mlp_norm", "mlp_act", "mlp_mul"})
ROOT = Path(__file__).resolve().parents[2]
COMMITTED = ("results/h200/profile_llama2-13b.json", "results/h200/profile_gpt3-13b.json",
             "results/h200x8/plans/profile.json")


@lru_cache(maxsize=None)
def committed(path: str, layers: int):
    return derive_profile(load_profile(ROOT / path), num_layers=layers)


@settings(max_examples=examples(50), **SETTINGS)
@given(st.sampled_from(COMMITTED), st.sampled_from([4, 16, 40, 88]), st.integers(1, 8), st.integers(1, 33),
       st.sampled_from([frozenset(), frozenset({FULL})]))
def test_identify_and_the_layout_count_are_the_folds_on_1f1b(path, layers, p, m, r):
    prof = committed(path, layers)
    part = tuple(models.even_partition(prof.num_units, p))
    costs = stage_costs(prof, part, (r,) * p)
    tl = simulate(generate("1f1b", p, m, adjusted="all" if r else None, recompute=("full",)), costs)
    for s in range(p):
        fold = (costs.weight_bytes[s] + tl.stages[s].peak_held_bytes + working_bytes(prof, part[s], r)
                + program_outputs(costs, s, False))
        closed = stage_peak_1f1b(prof, part[s], s, p, m, r)
        # the second gradient arrives during B or not, by the durations: never below
        assert fold <= closed <= fold + costs.boundary_bytes[s]
    assert inflight_1f1b(p, m) == tuple(st.peak_inflight_microbatches for st in tl.stages)


@st.composite
def planning_cases(draw):
    """A synthetic profile, an even partition, m, per-stage recompute sets, the
    adjusted prefix 0..k and a swap point of the planner's grid."""
    layers = draw(st.integers(2, 8))
    prof = synthetic_profile(num_layers=layers, host_bandwidth=draw(st.sampled_from([2 * MB, 20 * MB, 2000 * MB])),
                             p2p_bandwidth=draw(st.sampled_from([1e12, 50 * MB])),
                             p2p_latency=draw(st.sampled_from([0.0, 0.05])))
    p = draw(st.integers(2, min(6, prof.num_units)))
    m = draw(st.integers(1, 12))
    part = tuple(models.even_partition(prof.num_units, p))
    sets = tuple(draw(st.sampled_from([frozenset(), CMB, frozenset({FULL})])) for _ in range(p))
    k = draw(st.integers(0, p - 1))
    return prof, part, m, sets, k, draw(st.integers(0, 30))


@settings(max_examples=examples(50), **SETTINGS)
@given(planning_cases())
def test_the_planners_peaks_bound_and_resident_blocks_are_the_folds(case):
    """An Obscura configuration at one swap point of the planner's grid."""
    prof, part, m, sets, k, pick = case
    p = len(part)
    setting = Setting(prof, m, math.inf)
    adjusted = tuple(range(k + 1))
    sets = tuple(frozenset({FULL}) if s <= k else sets[s] for s in range(p))
    costs = setting.costs(part, sets)
    work = [working_bytes(prof, part[s], sets[s]) + program_outputs(costs, s, False) for s in range(p)]
    order = base_order(setting, part, k, sets)
    warm = warmups_of_rows(order)
    grid = swap_options(k, p, warm, True)
    lam_k, beta = grid[pick % len(grid)]
    lam = chain_swap_blocks(k, lam_k, warm)
    config = Config("obscura", part, adjusted, sets, lam, beta if any(lam) else 0.0, order)
    ev = simulate_config(setting, config)
    tl = simulate(ev.schedule, ev.costs)
    assert ev.peaks == tuple(ev.costs.weight_bytes[s] + tl.stages[s].peak_held_bytes + work[s] for s in range(p))
    bound = -math.inf
    for s, spec in enumerate(ev.schedule.stages):
        row = spec.actions
        first_b = warmup_count(row) and next(i for i, a in enumerate(row) if a.kind.value in ("B", "I"))
        held = order_memory(row[:first_b], Uniform(StageMemory(kept=1.0, swap_fraction=config.beta)))
        need = ev.costs.weight_bytes[s] + held.peak_activation_bytes * ev.costs.kept_bytes(s, spec.adjusted) + work[s]
        bound = max(bound, need - 1e-9 * abs(need))
    assert peak_lower_bound(setting, config) == pytest.approx(bound, rel=1e-12)
    assert bound <= max(ev.peaks) + 1e-6
    instant = simulate(ev.schedule, ev.costs.with_(host_bandwidth=math.inf))
    for s in range(p):
        kept = ev.costs.kept_bytes(s, ev.schedule.stages[s].adjusted)
        assert resident_blocks(ev.schedule, s) * kept == pytest.approx(
            instant.stages[s].peak_activation_bytes, rel=1e-12, abs=1e-6)
