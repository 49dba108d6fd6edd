"""Obscura: strawman + dependency relaxation + migration optimization + swapping.

Non-adjusted stages keep 1F1B. Each adjusted stage s runs the relaxed order of
`relax.py` with an in-flight cap c_s: forwards until its first gradient arrives
(at most c_s), then 1:1 interleaving in which a forward fills the bubble before a
backward whose gradient is late, and that backward moves right.

Migration optimization chooses the caps. The strawman migrates up to 3(p-s-1)+1
forwards on every adjusted stage, but stages s < k (k = last adjusted stage) are
paced by the backward stream coming from stage k, so most of their migrated
forwards only hold memory. Starting from the strawman's counts (which bound the
caps, so Obscura never holds more micro-batches than the strawman), stages k,
k-1, ..., 0 in turn get the smallest cap bisection finds that keeps the makespan,
under the generator's cost model, at most that of the strawman and of the relaxed
order with the strawman's caps. Why a search and not the paper's closed rule
(c_s = c_k + (k-s)): with uniform costs that rule keeps the makespan, but on
heterogeneous stage costs (f_s in [0.5,1.5], b_s ~ 2f_s, r_s in [0.2,1]f_s,
p2p 0-0.3) it lengthened it against the strawman in 49 of 300 random cases,
the search in none (`python scripts/tables/schedule_grid.py --random 300`).
If relaxation itself cannot match the strawman under the costs, the strawman's
order is kept (relaxation is then skipped, never harmful).

Without `costs` the model is uniform f=1, b=2, r=1. `warmup` (per-stage tuple)
fixes the caps instead (the planner's choice of mu_s). Swapping (lambda_s blocks,
fraction beta) is the pass of `swap.py`: eviction in warm-up, eviction-loading in
the steady phase, loading in cool-down; lambda_{s-1} = lambda_s + 1 by default.
The relaxation prices actions by the per-kind table (schedules/actions.py:
action_overhead included), and the links of the stages that will swap as shared
(link_sharing), so its makespan is the simulator's on its rows.

p=4, m=8, adjusted=1, f=1, b=2, r=1 (R = recompute part of B). Makespan 36, as
the strawman's, with at most 7 micro-batches in flight on stage 0 instead of 8;
stage 1 runs B1 and B2 before F7 because F7 has not arrived (stage 0 is at its cap):

    stage 0 |FFFFFFF....RBBFRBBRBBRBBRBBRBBRBBRBB|
            |0123456    0--71--2--3--4--5--6--7--|
    stage 1 |.FFFFFFFRBBRBBRBBFRBBRBBRBBRBBRBB...|
            | 01234560--1--2--73--4--5--6--7--   |
    stage 2 |..FF..BBFBBFBBFBBFBBFBBFBB.BB.......|
            |  01  0-21-32-43-54-65-76- 7-       |
    stage 3 |...FBBFBBFBBFBBFBBFBBFBBFBB.........|
            |   00-11-22-33-44-55-66-77-         |

With swap_blocks=2, swap_fraction=1 (lambda_1 = 2, lambda_0 = 3), stage 0's list:
    F0 F1 F2 SO2 F3 SO3 F4 SO4 F5 F6 B0 F7 SO7 SI2 B1 SI3 B2 SI4 B3 SI7 B4 B5 B6 B7
"""
from __future__ import annotations

from schedules.costs import StageCosts
from schedules.errors import ScheduleError
from schedules.generators.common import assemble, one_f_one_b_row, setup
from schedules.generators.caps import bisect_caps
from schedules.generators.relax import StageRelaxation, relaxed_rows
from schedules.generators.strawman import strawman_warmup
from schedules.generators.swap import add_swaps, resolve_swap_blocks, swap_intent
from schedules.ir import Schedule

_TOL = 1e-9


def min_caps(num_stages: int, num_microbatches: int, adjusted, fixed_warmup) -> dict[int, int]:
    """Smallest deadlock-free cap per adjusted stage: stage s must be able to run as
    many forwards as stage s+1 needs before stage s+1's first backward."""
    p, m = num_stages, num_microbatches
    need = [1] * p            # forwards stage s runs before its first backward can happen
    for s in range(p - 2, -1, -1):
        need[s] = max(need[s + 1], 1 if s in adjusted else fixed_warmup[s])
    return {s: min(m, need[s + 1]) if s < p - 1 else 1 for s in adjusted}


def migration_caps(num_stages: int, num_microbatches: int, adjusted, costs: StageCosts, swapping=()
                   ) -> tuple[dict[int, int] | None, float, list | None]:
    """Caps per adjusted stage, their makespan and rows; (None, strawman's makespan,
    None) if the strawman's order wins. `swapping`: stages whose copies will share
    their links (generators/swap.py: swap_intent)."""
    p, m = num_stages, num_microbatches
    fixed = {s: one_f_one_b_row(s, m, min(p - s, m)) for s in range(p) if s not in adjusted}
    straw = strawman_warmup(p, m, adjusted)
    caps = {s: straw[s] for s in adjusted}
    relax = StageRelaxation(p, m, fixed, caps, costs, adjusted, swapping)
    t_straw = relax.in_order([one_f_one_b_row(s, m, straw[s]) for s in range(p)])
    found = relax(caps)
    if found[1] > t_straw * (1 + _TOL):
        return None, t_straw, None
    low = min_caps(p, m, adjusted, [min(p - s, m) for s in range(p)])
    caps, (rows, t) = bisect_caps(relax, caps, low, found, found[1] * (1 + _TOL))
    return caps, t, rows


def obscura(num_stages: int, num_microbatches: int, *, adjusted="all", recompute=("full",),
            swap_blocks=0, swap_fraction: float = 0.0, warmup=None, costs: StageCosts | None = None
            ) -> Schedule:
    st = setup(num_stages, num_microbatches, adjusted, recompute, warmup=warmup, adjusted_default="all")
    p, m, adj, rec, warmup = st.num_devices, st.num_microbatches, st.adjusted, st.recompute, st.warmup
    costs = costs if costs is not None else StageCosts.uniform(p, fwd=1.0, bwd=2.0, recompute=1.0)
    if costs.num_stages != p:
        raise ScheduleError(f"costs describe {costs.num_stages} stages, the schedule has {p}")
    fixed = {s: one_f_one_b_row(s, m, min(p - s, m)) for s in range(p) if s not in adj}
    swapping = swap_intent(swap_blocks, swap_fraction, adj)
    if warmup is not None:
        caps = {s: min(warmup[s], m) for s in adj}
        fixed = {s: one_f_one_b_row(s, m, warmup[s]) for s in fixed}
        for s, lo in min_caps(p, m, adj, [min(w, m) for w in warmup]).items():
            if caps[s] < lo:
                raise ScheduleError(f"warmup[{s}]={warmup[s]} deadlocks: stage {s} must be able to run {lo} "
                                    f"forwards, which stage {s + 1} needs before its first backward")
        rows = None
    else:
        caps, _, rows = migration_caps(p, m, adj, costs, swapping)
    if caps is None:
        straw = strawman_warmup(p, m, adj)
        rows = [one_f_one_b_row(s, m, straw[s]) for s in range(p)]
    elif rows is None:
        rows, _ = relaxed_rows(p, m, fixed, caps, costs, adj, swapping=swapping)
    lam = resolve_swap_blocks(swap_blocks, swap_fraction, rows, adj)
    return assemble("obscura", m, add_swaps(rows, lam), adj, rec, lam, swap_fraction)
