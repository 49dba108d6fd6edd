"""The paper's memory (Eq. 1) and time (Eq. 2-3) models against the simulator,
which is the judge. Differences found (reported in BENCHMARKS.md ("Planner")):
- Eq. 3 equals the simulated makespan exactly for uniform costs without swapping
  (1F1B, Recomp-All, Obscura for every k);
- Eq. 1 equals the count over the generated order exactly; the simulator, which
  frees a swapped block only when its SO ends, sees up to a few blocks more when
  transfers are slower than a forward;
- where blocks hide (a beta <= (3f + r) B, the IP's constraint) Eq. 2 never
  predicts less time than the simulator (it is pessimistic by up to ~25%)."""
import pytest

from planner.memory_model import (eq1_resident_blocks, peaks_1f1b, peaks_obscura, peaks_strawman,
                                  resident_blocks, stage_peaks, warmup_obscura)
from planner.search import warmups
from planner.time_model import finish_times, predict, swap_hides
from schedules import StageCosts, generate, simulate

GRID = [(p, m) for p in (2, 4, 8) for m in (p, 2 * p, 4 * p)]


def uniform(p, **kw):
    return StageCosts.uniform(p, fwd=1.0, bwd=2.0, recompute=1.0, act_bytes=40, act_bytes_recompute=20,
                              weight_bytes=100, **kw)


@pytest.mark.parametrize("p, m", GRID)
def test_eq3_equals_simulated_makespan_without_swapping(p, m):
    c = uniform(p)
    assert predict(c, m, -1).iteration_time == simulate(generate("1f1b", p, m), c).makespan
    assert predict(c, m, p - 1).iteration_time == simulate(generate("recomp", p, m, adjusted="all"), c).makespan
    for k in range(p):
        sim = simulate(generate("obscura", p, m, adjusted=k, costs=c), c).makespan
        assert predict(c, m, k).iteration_time == pytest.approx(sim)


def test_finish_times_match_the_closed_form():
    # s > k: T_s = 3mf + 3(p-s-1)f with f = 1
    t = finish_times(8, 16, 2, 4.0, 3.0)
    assert t[3:] == tuple(3.0 * (16 + 8 - s - 1) for s in range(3, 8))
    assert t[2] == max(t[3] + 4.0, 4.0 * 16)


@pytest.mark.parametrize("p, m", [(4, 8), (8, 16), (8, 32)])
def test_memory_closed_forms_equal_the_simulator_without_swapping(p, m):
    c = uniform(p)
    sim = lambda sched: tuple(c.weight_bytes[s] + simulate(sched, c).stages[s].peak_activation_bytes
                              for s in range(p))
    assert peaks_1f1b(c, m) == sim(generate("1f1b", p, m))
    for n in range(p):
        assert peaks_1f1b(c, m, range(n + 1)) == sim(generate("recomp", p, m, adjusted=n))
        assert peaks_strawman(c, m, n) == sim(generate("strawman", p, m, adjusted=n))


# The paper's domain: lambda_k in [1, p - k - 2] (Eq. 4 says [2, p-k-2]; 1 is tried too).
# Beyond it the two can differ: p=4, k=2, lambda_k=1 simulates 48 where Eq. 2 says 41,
# and the swap pass loads a block before the next eviction, so Eq. 1 under-counts.
SWAPS = [(p, m, k, lam_k, beta) for p, m in ((4, 8), (8, 16), (8, 32)) for k in (0, 1, 2)
         for lam_k, beta in ((1, 1.0), (2, 0.5), (2, 0.75), (p - k - 2, 1.0)) if 1 <= lam_k <= p - k - 2]


def _swapped(p, m, k, lam_k, beta, c):
    caps = tuple(warmup_obscura(p, m, k, s) for s in range(p))
    w = warmups(generate("obscura", p, m, adjusted=k, costs=c, warmup=caps))
    lam = tuple(min(lam_k + k - s, w[s] - 1) if s <= k else 0 for s in range(p))
    return generate("obscura", p, m, adjusted=k, costs=c, warmup=caps, swap_blocks=lam,
                    swap_fraction=beta), lam


@pytest.mark.parametrize("p, m, k, lam_k, beta", SWAPS)
def test_eq1_equals_the_count_over_the_order(p, m, k, lam_k, beta):
    c = uniform(p)
    sched, lam = _swapped(p, m, k, lam_k, beta, c)
    assert peaks_obscura(c, m, k, lam, beta) == pytest.approx(stage_peaks(sched, c))
    for s in range(k + 1):
        assert resident_blocks(sched, s) == pytest.approx(
            eq1_resident_blocks(warmup_obscura(p, m, k, s), lam[s], beta))


@pytest.mark.parametrize("p, m, k, lam_k, beta", SWAPS)
@pytest.mark.parametrize("host_bandwidth", [float("inf"), 10.0, 5.0])
def test_simulator_judges_swapped_memory_and_time(p, m, k, lam_k, beta, host_bandwidth):
    c = uniform(p, host_bandwidth=host_bandwidth)
    sched, lam = _swapped(p, m, k, lam_k, beta, c)
    tl = simulate(sched, c)
    counted = stage_peaks(sched, c)
    simulated = [c.weight_bytes[s] + tl.stages[s].peak_activation_bytes for s in range(p)]
    if host_bandwidth == float("inf"):
        assert simulated == pytest.approx(counted)  # instant swaps: the count is exact
    else:
        assert all(sm >= ct - 1e-9 for sm, ct in zip(simulated, counted))  # slow SO frees late
    # every block hides here (20 * beta / B <= 3f + r = 4), so Eq. 2 is never optimistic
    assert swap_hides(20, beta, host_bandwidth, 1.0, 2.0, 1.0)
    assert predict(c, m, k, lam, beta).iteration_time >= tl.makespan - 1e-9
