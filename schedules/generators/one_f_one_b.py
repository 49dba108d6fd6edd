"""1F1B (DAPPLE / PipeDream-Flush) and Recomp-N (on-demand recompute).

Stage s warms up with min(p-s, m) forwards, then alternates one backward and one
forward, then cools down with the remaining backwards; it holds at most p-s
micro-batches. `recomp` is the same order with recompute on the adjusted stages
(stages 0..N; adjusted="all" is Recomp-All = DAPPLE+), so `1f1b` with `adjusted`
given is the same schedule under another name.

p=4, m=8, f=1, b=2, no recompute (one char = one time unit; upper line: F/B
running, R = recompute part of a B; lower line: micro-batch). Makespan 33 =
(m+p-1)(f+b):

    stage 0 |FFFF......BBFBBFBBFBBFBB.BB.BB.BB|
            |0123      0-41-52-63-74- 5- 6- 7-|
    stage 1 |.FFF....BBFBBFBBFBBFBBFBB.BB.BB..|
            | 012    0-31-42-53-64-75- 6- 7-  |
    stage 2 |..FF..BBFBBFBBFBBFBBFBBFBB.BB....|
            |  01  0-21-32-43-54-65-76- 7-    |
    stage 3 |...FBBFBBFBBFBBFBBFBBFBBFBB......|
            |   00-11-22-33-44-55-66-77-      |

Recomp-0 (r=1: stage 0's backwards take b+r = 3), makespan 38:

    stage 0 |FFFF......RBBFRBBFRBBFRBBFRBBRBBRBBRBB|
            |0123      0--41--52--63--74--5--6--7--|
    stage 1 |.FFF....BBFBB.FBB.FBB.FBB.FBB.BB.BB...|
            | 012    0-31- 42- 53- 64- 75- 6- 7-   |
    stage 2 |..FF..BBFBBFBB.FBB.FBB.FBB.FBB.BB.....|
            |  01  0-21-32- 43- 54- 65- 76- 7-     |
    stage 3 |...FBBFBBFBBFBB.FBB.FBB.FBB.FBB.......|
            |   00-11-22-33- 44- 55- 66- 77-       |
"""
from __future__ import annotations

from schedules.generators.common import assemble, one_f_one_b_row, setup
from schedules.generators.swap import add_swaps, resolve_swap_blocks
from schedules.ir import Schedule


def _one_f_one_b(name, num_stages, num_microbatches, adjusted, recompute, swap_blocks, swap_fraction,
                 warmup=None, adjusted_default=None) -> Schedule:
    st = setup(num_stages, num_microbatches, adjusted, recompute, warmup=warmup, adjusted_default=adjusted_default)
    p, m, adj, rec = st.num_devices, st.num_microbatches, st.adjusted, st.recompute
    warmup = tuple(min(p - s, m) for s in range(p)) if st.warmup is None else st.warmup
    rows = [one_f_one_b_row(s, m, warmup[s]) for s in range(p)]
    lam = resolve_swap_blocks(swap_blocks, swap_fraction, rows, adj)
    return assemble(name, m, add_swaps(rows, lam), adj, rec, lam, swap_fraction)


def one_f_one_b(num_stages: int, num_microbatches: int, *, adjusted=None, recompute=("full",),
                swap_blocks=0, swap_fraction: float = 0.0, warmup=None, costs=None) -> Schedule:
    """1F1B; `warmup` (a per-stage tuple) overrides the min(p-s, m) warm-up forwards."""
    return _one_f_one_b("1f1b", num_stages, num_microbatches, adjusted, recompute, swap_blocks,
                        swap_fraction, warmup)


def recomp(num_stages: int, num_microbatches: int, *, adjusted="all", recompute=("full",),
           swap_blocks=0, swap_fraction: float = 0.0, warmup=None, costs=None) -> Schedule:
    """Recomp-N: 1F1B with recompute on stages 0..N (adjusted=N); default Recomp-All."""
    return _one_f_one_b("recomp", num_stages, num_microbatches, adjusted, recompute, swap_blocks,
                        swap_fraction, warmup, adjusted_default="all")
