"""Strawman pipeline (the paper's pipeline transformation, section 3).

Adjusted stages migrate steady-phase forwards into their forward bubble: stage s
runs min(m, 3(p-s-1)+1) forwards before its first backward (its p-s warm-up
forwards plus the 2(p-s-1) forward slots of 1F1B's forward bubble), then
alternates backward/forward, then cools down. The forward bubble becomes backward
bubbles, where the adjusted stage's recompute hides. Non-adjusted stages stay 1F1B.

p=4, m=8, f=1, b=2, r=1, adjusted=0 (R = recompute part of a B). Makespan 34
(Recomp-0: 38, 1F1B without recompute: 33); stage 0 holds all 8 micro-batches:

    stage 0 |FFFFFFFF..RBBRBBRBBRBBRBBRBBRBBRBB|
            |01234567  0--1--2--3--4--5--6--7--|
    stage 1 |.FFF....BBFBBFBBFBBFBBFBB.BB.BB...|
            | 012    0-31-42-53-64-75- 6- 7-   |
    stage 2 |..FF..BBFBBFBBFBBFBBFBBFBB.BB.....|
            |  01  0-21-32-43-54-65-76- 7-     |
    stage 3 |...FBBFBBFBBFBBFBBFBBFBBFBB.......|
            |   00-11-22-33-44-55-66-77-       |
"""
from __future__ import annotations

from schedules.generators.common import assemble, one_f_one_b_row, setup
from schedules.generators.swap import add_swaps, resolve_swap_blocks
from schedules.ir import Schedule


def strawman_warmup(num_stages: int, num_microbatches: int, adjusted) -> tuple[int, ...]:
    """Warm-up forwards per stage. Adjusted stages are normally a prefix; if not, a
    stage before an adjusted one runs at least as many warm-up forwards as the stage
    after it (stage s+1's first backward needs that many forwards from stage s)."""
    p, m = num_stages, num_microbatches
    warm = [min(m, 3 * (p - s - 1) + 1) if s in adjusted else min(p - s, m) for s in range(p)]
    for s in range(p - 2, -1, -1):
        warm[s] = max(warm[s], warm[s + 1])
    return tuple(warm)


def strawman(num_stages: int, num_microbatches: int, *, adjusted="all", recompute=("full",),
             swap_blocks=0, swap_fraction: float = 0.0, costs=None) -> Schedule:
    st = setup(num_stages, num_microbatches, adjusted, recompute, adjusted_default="all")
    p, m, adj, rec = st.num_devices, st.num_microbatches, st.adjusted, st.recompute
    warm = strawman_warmup(p, m, adj)
    rows = [one_f_one_b_row(s, m, warm[s]) for s in range(p)]
    lam = resolve_swap_blocks(swap_blocks, swap_fraction, rows, adj)
    return assemble("strawman", m, add_swaps(rows, lam), adj, rec, lam, swap_fraction)
