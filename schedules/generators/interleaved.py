"""Interleaved 1F1B (Megatron-LM; Narayanan et al., SC'21): each of the p devices
runs V model chunks, so the model has p*V stages and stage s runs on device s % p
(chunk s // p). A device walks its forwards in rounds of p micro-batches, chunk 0
first, then chunk 1, ...; its backwards in the same rounds, last chunk first. It
warms up with (p-d-1)*2 + (V-1)*p forwards (all of them when m == p), then
alternates one forward and one backward, then drains: Megatron's order. Like
Megatron it needs m to be a multiple of p. The 1F1B bubble (p-1)(f+b) shrinks
V-fold, to (p-1)(f+b)/V, for V times the point-to-point messages.

p=4, V=2, m=8, each chunk f=1, b=2 (a device's whole model: 2 and 4). Makespan 57
= m*V*(f+b) + (p-1)(f+b) = 48 + 9; non-interleaved 1F1B on the same model takes
(m+p-1)*(2+4) = 66. Per device: the kind running, the micro-batch, the stage:

    device 0 |FFFFFFFFFFF...BBFBB.FBBFBBFBBFBBBB.BB.BB.BB.BB.BBBBBBBBBB|
             |01230123456   0-71- 42-53-60-71-2- 3- 4- 5- 6- 7-4-5-6-7-|
             |00004444000   4-04- 44-44-40-40-0- 0- 4- 4- 4- 4-0-0-0-0-|
    device 1 |.FFFFFFFFF..BBFBBFBBFBBFBBFBBFBBFBB.BB.BB.BB.BBBBBBBBBB..|
             | 012301234  0-51-62-73-40-51-62-73- 4- 5- 6- 7-4-5-6-7-  |
             | 111155551  5-15-15-15-51-51-51-51- 5- 5- 5- 5-1-1-1-1-  |
    device 2 |..FFFFFFF.BBFBBFBBFBBFBBFBBFBBFBBFBBFBB.BB.BBBBBBBBBB....|
             |  0123012 0-31-42-53-60-71-42-53-64-75- 6- 7-4-5-6-7-    |
             |  2222666 6-66-26-26-22-22-62-62-66-66- 6- 6-2-2-2-2-    |
    device 3 |...FFFFFBBFBBFBBFBBFBBFBBFBBFBBFBBFBBFBBFBBBBBBBBBB......|
             |   012300-11-22-33-40-51-62-73-44-55-66-77-4-5-6-7-      |
             |   333377-77-77-77-33-33-33-33-77-77-77-77-3-3-3-3-      |

V=1 gives plain 1F1B's order.
"""
from __future__ import annotations

from schedules.errors import ScheduleError
from schedules.generators.common import assemble_devices, setup
from schedules.generators.swap import add_swaps, resolve_swap_blocks
from schedules.ir import Action, Kind, Schedule


def interleaved_stage_to_device(num_devices: int, virtual_stages: int) -> tuple[int, ...]:
    """Stage s runs on device s % p (Megatron's and torch's looped placement)."""
    return tuple(s % num_devices for s in range(num_devices * virtual_stages))


def _op(device: int, k: int, p: int, v: int, backward: bool) -> tuple[int, int]:
    """(stage, micro-batch) of a device's k-th forward (or backward): rounds of p
    micro-batches per chunk, chunks ascending for forwards, descending for backwards."""
    chunk = (k // p) % v
    if backward:
        chunk = v - 1 - chunk
    return chunk * p + device, (k // (p * v)) * p + k % p


def interleaved_row(device: int, num_devices: int, num_microbatches: int, virtual_stages: int) -> list[Action]:
    p, m, v = num_devices, num_microbatches, virtual_stages
    total = m * v
    if v == 1:
        warm = p - device - 1
    elif m == p:
        warm = total
    else:
        warm = (p - device - 1) * 2 + (v - 1) * p
    warm = min(warm, total)

    def act(k: int, backward: bool) -> Action:
        s, x = _op(device, k, p, v, backward)
        return Action(s, Kind.B if backward else Kind.F, x)

    row = [act(k, False) for k in range(warm)]
    for i in range(total - warm):
        row += [act(warm + i, False), act(i, True)]
    row += [act(k, True) for k in range(total - warm, total)]
    return row


def interleaved_rows(num_devices: int, num_microbatches: int, virtual_stages: int) -> list[list[Action]]:
    p, m = num_devices, num_microbatches
    if m % p:
        raise ScheduleError(f"interleaved needs the micro-batches ({m}) to be a multiple of the pipeline depth "
                            f"({p}), as Megatron-LM's interleaved schedule does")
    return [interleaved_row(d, p, m, virtual_stages) for d in range(p)]


def interleaved(num_stages: int, num_microbatches: int, *, virtual_stages: int = 2, adjusted=None,
                recompute=("full",), swap_blocks=0, swap_fraction: float = 0.0, costs=None) -> Schedule:
    """`num_stages` is the pipeline depth p (devices); the schedule has p*V stages.
    `adjusted` names model stages (K: stages 0..K); swap_blocks counts a device's
    blocks (lambda at the last device hosting an adjusted stage)."""
    st = setup(num_stages, num_microbatches, adjusted, recompute, stages_per_device=virtual_stages)
    p, m, v, adj, rec = st.num_devices, st.num_microbatches, virtual_stages, st.adjusted, st.recompute
    where = interleaved_stage_to_device(p, v)
    rows = interleaved_rows(p, m, v)
    lam = resolve_swap_blocks(swap_blocks, swap_fraction, rows, sorted({where[s] for s in adj}))
    return assemble_devices("interleaved", m, add_swaps(rows, lam), where, adj, rec, swap_fraction)
