"""The paper's memory model (Eq. 1) against the simulator, which is the judge, and
swapped schedules judged on both memory and time. Differences found (reported in
BENCHMARKS.md ("Planner")):
- Eq. 1 equals the count over the generated order exactly; the simulator, which
  frees a swapped block only when its SO ends, sees up to a few blocks more when
  transfers are slower than a forward;
- where blocks hide (a beta <= (3f + r) B, the IP's constraint) Eq. 2 never
  predicts less time than the simulator (it is pessimistic by up to ~25%)."""
import pytest

from tests.planner.paper_memory import eq1_resident_blocks, peaks_1f1b, peaks_obscura, peaks_strawman, warmup_obscura
from planner.search import resident_blocks, warmups
from planner.time_model import predict_closed_form, swap_hides
from schedules import StageCosts, generate, simulate
from schedules.memory import order_memory
from schedules.simulator import stage_memory


def counted_peaks(sched, c):
    """W_s + the one fold's count over stage s's own order (each action done at its place)."""
    mem = stage_memory(sched, c)
    return tuple(c.weight_bytes[s] + order_memory(sched.stages[s].actions, mem).peak_activation_bytes
                 for s in range(sched.num_stages))

def uniform(p, **kw):
    return StageCosts.uniform(p, fwd=1.0, bwd=2.0, recompute=1.0, act_bytes=40, act_bytes_recompute=20,
                              weight_bytes=100, **kw)


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
    assert peaks_obscura(c, m, k, lam, beta) == pytest.approx(counted_peaks(sched, c))
    for s in range(k + 1):
        assert resident_blocks(sched, s) == pytest.approx(
            eq1_resident_blocks(warmup_obscura(p, m, k, s), lam[s], beta))


@pytest.mark.parametrize("p, m, k, lam_k, beta", SWAPS)
@pytest.mark.parametrize("host_bandwidth", [float("inf"), 10.0, 5.0])
def test_simulator_judges_swapped_memory_and_time(p, m, k, lam_k, beta, host_bandwidth):
    c = uniform(p, host_bandwidth=host_bandwidth)
    sched, lam = _swapped(p, m, k, lam_k, beta, c)
    tl = simulate(sched, c)
    counted = counted_peaks(sched, c)
    simulated = [c.weight_bytes[s] + tl.stages[s].peak_activation_bytes for s in range(p)]
    if host_bandwidth == float("inf"):
        assert simulated == pytest.approx(counted)  # instant swaps: the count is exact
    else:
        assert all(sm >= ct - 1e-9 for sm, ct in zip(simulated, counted))  # slow SO frees late
    # every block hides here (20 * beta / B <= 3f + r = 4), so Eq. 2 is never optimistic
    assert swap_hides(20, beta, host_bandwidth, 1.0, 2.0, 1.0)
    assert predict_closed_form(c, m, k, lam, beta).iteration_time >= tl.makespan - 1e-9


@pytest.mark.parametrize("name,kw", [("1f1b", {}), ("recomp", {"adjusted": 1}),
                                     ("obscura", {"adjusted": 1, "swap_blocks": 2, "swap_fraction": 0.5}),
                                     ("obscura", {"adjusted": 2, "swap_blocks": 1, "swap_fraction": 1.0})])
@pytest.mark.parametrize("host", [1e9, 40.0, 5.0])
def test_the_held_peak_is_at_least_the_blocks_and_the_count_over_the_order(name, kw, host):
    """The planner's stage peak, Timeline.peak_held_bytes (schedules.memory), is the
    simulated residuals plus the inbox: at least the simulated activation peak, and
    at least the count over the action order whenever swaps keep up with the forwards."""
    c = uniform(4, boundary_bytes=7.0, host_bandwidth=host)
    s = generate(name, 4, 8, costs=c, **kw)
    tl = simulate(s, c)
    held = tuple(st.peak_held_bytes for st in tl.stages)
    assert all(h >= st.peak_activation_bytes for h, st in zip(held, tl.stages))
    if host >= 40.0:
        counted = counted_peaks(s, c)
        assert all(h >= a - w for h, a, w in zip(held, counted, c.weight_bytes))


@pytest.mark.parametrize("p, m, k, lam_k, beta", SWAPS)
@pytest.mark.parametrize("host_bandwidth", [10.0, 5.0])
def test_eq4_a_block_that_hides_costs_the_simulator_nothing(p, m, k, lam_k, beta, host_bandwidth):
    """Eq. 4's transfer constraint a_adj beta <= (3f + r) B: where every swapped
    block hides, the simulated iteration is the one without host transfers."""
    c = uniform(p, host_bandwidth=host_bandwidth)
    sched, lam = _swapped(p, m, k, lam_k, beta, c)
    if all(swap_hides(c.kept_bytes(s, True), beta, host_bandwidth, c.fwd[s], c.bwd[s], c.recompute[s])
           for s in range(k + 1) if lam[s]):
        free = simulate(sched, c.with_(host_bandwidth=float("inf"))).makespan
        assert simulate(sched, c).makespan == free
