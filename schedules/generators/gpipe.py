"""GPipe: all forwards, then all backwards (backwards in micro-batch order, as the
FIFO rule of the validator wants). Holds m micro-batches on every stage.

p=4, m=8, f=1, b=2, makespan 33 (one char = one time unit; upper line: F/B running,
lower line: the micro-batch each op works on; see schedules.formats.text.timeline_ascii):

    stage 0 |FFFFFFFF.........BBBBBBBBBBBBBBBB|
            |01234567         0-1-2-3-4-5-6-7-|
    stage 1 |.FFFFFFFF......BBBBBBBBBBBBBBBB..|
            | 01234567      0-1-2-3-4-5-6-7-  |
    stage 2 |..FFFFFFFF...BBBBBBBBBBBBBBBB....|
            |  01234567   0-1-2-3-4-5-6-7-    |
    stage 3 |...FFFFFFFFBBBBBBBBBBBBBBBB......|
            |   012345670-1-2-3-4-5-6-7-      |
"""
from __future__ import annotations

from schedules.generators.common import assemble, setup
from schedules.generators.swap import add_swaps, resolve_swap_blocks
from schedules.ir import Action, Kind, Schedule


def gpipe(num_stages: int, num_microbatches: int, *, adjusted=None, recompute=("full",),
          swap_blocks=0, swap_fraction: float = 0.0, costs=None) -> Schedule:
    st = setup(num_stages, num_microbatches, adjusted, recompute)
    p, m, adj, rec = st.num_devices, st.num_microbatches, st.adjusted, st.recompute
    rows = [[Action(s, Kind.F, x) for x in range(m)] + [Action(s, Kind.B, x) for x in range(m)]
            for s in range(p)]
    lam = resolve_swap_blocks(swap_blocks, swap_fraction, rows, adj)
    rows = add_swaps(rows, lam)
    return assemble("gpipe", m, rows, adj, rec, lam, swap_fraction)
