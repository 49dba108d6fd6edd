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
    """Simulating every candidate (here) and the bound-pruned search find the same
    first least peak; the search simulates fewer than half of them."""
    free = Setting(setting.profile, setting.num_microbatches, math.inf)
    cands = floor_candidates(setting, even())
    peaks = [max(simulate_config(free, cfg).peaks) for cfg in cands]
    first = min(range(len(cands)), key=lambda i: (peaks[i], i))
    calls = []
    real = baselines.simulate_config
    monkeypatch.setattr(baselines, "simulate_config", lambda *a: calls.append(1) or real(*a))
    need, ev = minimum_memory(setting, even())
    assert need == peaks[first] and ev.config == cands[first]
    assert ev.peaks == simulate_config(setting, cands[first]).peaks and len(calls) < (len(cands) + 1) / 2


def test_the_bound_is_below_every_candidates_simulated_peak(setting):
    cands = floor_candidates(setting, even())
    assert sum(any(c.swap_blocks) for c in cands) > 0   # swapping candidates are covered
    for cfg in cands:
        assert peak_lower_bound(setting, cfg) <= max(simulate_config(setting, cfg).peaks)
