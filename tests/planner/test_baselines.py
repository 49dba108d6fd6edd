"""planner.baselines.minimum_memory: the bound-pruned floor search returns what
simulating every candidate returns, and the bound never exceeds a simulated peak."""
import math

import pytest

import models
from planner import baselines
from planner.baselines import floor_candidates, minimum_memory, peak_lower_bound
from planner.search import Setting, simulate_config
from tests.planner.synthetic import MB, synthetic_profile

P, M = 4, 8


@pytest.fixture(scope="module", params=[20 * MB, 2000 * MB], ids=["slow-host", "fast-host"])
def setting(request):
    # a slow host link hides few swap points, a fast one all of them
    return Setting(synthetic_profile(num_layers=8, host_bandwidth=request.param), M, math.inf)


def even():
    return tuple(models.even_partition(synthetic_profile(num_layers=8).num_units, P))


def test_pruned_floor_is_the_exhaustive_floor_with_fewer_simulations(setting, monkeypatch):
    calls = []
    real = baselines.simulate_config
    monkeypatch.setattr(baselines, "simulate_config", lambda *a: calls.append(1) or real(*a))
    need, ev = minimum_memory(setting, even(), exhaustive=True)
    every = len(calls)
    calls.clear()
    need_pruned, ev_pruned = minimum_memory(setting, even())
    assert need_pruned == need and ev_pruned.config == ev.config and ev_pruned.peaks == ev.peaks
    assert every == len(floor_candidates(setting, even())) + 1 and len(calls) < every / 2


def test_the_bound_is_below_every_candidates_simulated_peak(setting):
    cands = floor_candidates(setting, even())
    assert sum(any(c.swap_blocks) for c in cands) > 0   # swapping candidates are covered
    for cfg in cands:
        assert peak_lower_bound(setting, cfg) <= max(simulate_config(setting, cfg).peaks)
