"""Looped BFS (breadth-first pipeline parallelism, Lamy-Poirier, arXiv 2211.05953;
torch.distributed.pipelining's ScheduleLoopedBFS): each of the p devices runs V
chunks, stage s on device s % p (chunk s // p), and runs every micro-batch through
a chunk before the next: all forwards of chunk 0, then of chunk 1, ...; then the
full backwards of the last chunk first, each chunk's in reverse micro-batch order
(the micro-batch whose forward ran last comes back first). Deep queues, GPipe's
memory (every micro-batch held on every chunk until its backward), few switches
between chunks.

p=4, V=2, m=8, each chunk f=1, b=2: makespan 57 (a device's work 48 + 9):

    device 0 |FFFFFFFFFFFFFFFF.........BBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBB|
             |0123456701234567         7-6-5-4-3-2-1-0-7-6-5-4-3-2-1-0-|
             |0000000044444444         4-4-4-4-4-4-4-4-0-0-0-0-0-0-0-0-|
    device 1 |.FFFFFFFFFFFFFFFF......BBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBB..|
             | 0123456701234567      7-6-5-4-3-2-1-0-7-6-5-4-3-2-1-0-  |
             | 1111111155555555      5-5-5-5-5-5-5-5-1-1-1-1-1-1-1-1-  |
    device 2 |..FFFFFFFFFFFFFFFF...BBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBB....|
             |  0123456701234567   7-6-5-4-3-2-1-0-7-6-5-4-3-2-1-0-    |
             |  2222222266666666   6-6-6-6-6-6-6-6-2-2-2-2-2-2-2-2-    |
    device 3 |...FFFFFFFFFFFFFFFFBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBB......|
             |   01234567012345677-6-5-4-3-2-1-0-7-6-5-4-3-2-1-0-      |
             |   33333333777777777-7-7-7-7-7-7-7-3-3-3-3-3-3-3-3-      |
"""
from __future__ import annotations

from schedules.generators.common import assemble_devices, setup
from schedules.generators.interleaved import interleaved_stage_to_device
from schedules.generators.swap import add_swaps, resolve_swap_blocks
from schedules.ir import Action, Kind, Schedule


def looped_bfs_row(device: int, num_devices: int, num_microbatches: int, virtual_stages: int) -> list[Action]:
    """torch's `_calculate_single_rank_operations` of ScheduleLoopedBFS, idle steps dropped."""
    stages = range(device, num_devices * virtual_stages, num_devices)
    row = [Action(s, Kind.F, x) for s in stages for x in range(num_microbatches)]
    return row + [Action(s, Kind.B, x) for s in reversed(stages) for x in reversed(range(num_microbatches))]


def looped_bfs(num_stages: int, num_microbatches: int, *, virtual_stages: int = 2, adjusted=None,
               recompute=("full",), swap_blocks=0, swap_fraction: float = 0.0, costs=None) -> Schedule:
    """`num_stages` is the pipeline depth p (devices); the schedule has p*V stages."""
    st = setup(num_stages, num_microbatches, adjusted, recompute, stages_per_device=virtual_stages)
    p, m, v, adj, rec = st.num_devices, st.num_microbatches, virtual_stages, st.adjusted, st.recompute
    where = interleaved_stage_to_device(p, v)
    rows = [looped_bfs_row(d, p, m, v) for d in range(p)]
    lam = resolve_swap_blocks(swap_blocks, swap_fraction, rows, sorted({where[s] for s in adj}))
    return assemble_devices("looped-bfs", m, add_swaps(rows, lam), where, adj, rec, swap_fraction)
