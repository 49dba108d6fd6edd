"""Interleaved zero bubble (torch.distributed.pipelining's ScheduleInterleavedZeroBubble,
its "ZB1P" on V looped chunks; Qi et al., ICLR'24): each of the p devices runs V
chunks, stage s on device s % p, as interleaved 1F1B does, and every backward splits
into I (input grad, what the upstream stage waits for) and W (weight grad, which
nobody waits for).

Device d walks torch's order (`_get_1f1b_rank_ops` with enable_zero_bubble):
forwards and backwards in rounds of r = m / max(1, m // p) micro-batches per chunk
(chunks ascending for forwards, descending for backwards); a warm-up of
min((V-1)r + (p-1-d), mV) forwards; then pairs (F, I); the W of each I runs
d pairs after it (device d's W are delayed by d pairs, so the later devices keep
their W for the bubbles before their next gradient arrives); then the drain, I with
the W owed, then the W still owed. Like torch, V > 1 needs m to be a multiple of
the number of rounds (m // p, at least 1).

p=4, V=2, m=4, each chunk f = I = W = 1 (a device's work per micro-batch 6):
makespan 27 = 24 + 3, where zb-v takes 30 at this m:

    device 0 |FFFFFFFF...IWIWIWIWIWIWIWIW|
             |01230123   0011223300112233|
             |00004444   4444444400000000|
    device 1 |.FFFFFFF..IFIWIWIWIWIWIWIWW|
             | 0123012  03102132031021323|
             | 1111555  55555555151111111|
    device 2 |..FFFFFF.IFIFIWIWIWIWIWIWWW|
             |  012301 021320310213203123|
             |  222266 666666662626222222|
    device 3 |...FFFFFIFIFIFIWIWIWIWIWWWW|
             |   012300112233001122330123|
             |   333377777777737373733333|

zb-h1 (zero_bubble.py) is the V = 1 case: one stage per device, p-1-d warm-up
forwards, (F, I) pairs with W delayed d pairs, then the drain.
"""
from __future__ import annotations

from schedules.errors import ScheduleError
from schedules.generators.common import assemble_devices, setup
from schedules.generators.interleaved import interleaved_stage_to_device
from schedules.generators.swap import add_swaps, resolve_swap_blocks
from schedules.ir import Action, Kind, Schedule


def round_size(num_devices: int, num_microbatches: int, virtual_stages: int) -> int:
    """torch's microbatches_per_round: m split into max(1, m // p) equal rounds;
    with V > 1, m must divide evenly (torch refuses otherwise)."""
    p, m = num_devices, num_microbatches
    rounds = max(1, m // p)
    if virtual_stages > 1 and m % rounds:
        raise ScheduleError(f"interleaved-zb needs the micro-batches ({m}) to be a multiple of the number of "
                            f"rounds ({rounds} = max(1, m // p)), as torch's ScheduleInterleavedZeroBubble does")
    return m // rounds


def torch_rank_row(device: int, num_devices: int, num_microbatches: int, virtual_stages: int, round_len: int,
                   warmup: int, w_delay: int | None) -> list[Action]:
    """One device's compute order as torch's `_get_1f1b_rank_ops` builds it: `warmup`
    forwards, (F, B) pairs, then the remaining backwards; with `w_delay` (zero
    bubble) each B is an I and its W follows `w_delay` pairs later, the W still owed
    at the end run last."""
    p, m, v, d, r = num_devices, num_microbatches, virtual_stages, device, round_len
    total = m * v
    nxt: dict[tuple[int, Kind], int] = {}
    back_kind = Kind.B if w_delay is None else Kind.I
    row: list[Action] = []
    owed: list[int] = []        # stages of the I whose W has not run yet, in order

    def take(stage: int, kind: Kind) -> Action:
        x = nxt.get((stage, kind), 0)
        nxt[(stage, kind)] = x + 1
        return Action(stage, kind, x)

    def fwd_stage(op: int) -> int:
        return ((op // r) % v) * p + d

    def bwd_stage(op: int) -> int:
        return (v - 1 - ((op - warmup) // r) % v) * p + d

    for op in range(total + warmup):
        if op < warmup:
            row.append(take(fwd_stage(op), Kind.F))
            continue
        if op < total:
            row.append(take(fwd_stage(op), Kind.F))
        row.append(take(bwd_stage(op), back_kind))
        owed.append(bwd_stage(op))
        if w_delay is not None and op - warmup >= w_delay:
            row.append(take(owed.pop(0), Kind.W))
    if w_delay is not None:
        row += [take(s, Kind.W) for s in owed]
    return row


def interleaved_zb_rows(num_devices: int, num_microbatches: int, virtual_stages: int) -> list[list[Action]]:
    p, m, v = num_devices, num_microbatches, virtual_stages
    r = round_size(p, m, v)
    return [torch_rank_row(d, p, m, v, r, min((v - 1) * r + (p - 1 - d), m * v), w_delay=d) for d in range(p)]


def interleaved_zb(num_stages: int, num_microbatches: int, *, virtual_stages: int = 2, adjusted=None,
                   recompute=("full",), swap_blocks=0, swap_fraction: float = 0.0, costs=None) -> Schedule:
    """`num_stages` is the pipeline depth p (devices); the schedule has p*V stages.
    `adjusted` names model stages (K: stages 0..K)."""
    st = setup(num_stages, num_microbatches, adjusted, recompute, stages_per_device=virtual_stages)
    p, m, v, adj, rec = st.num_devices, st.num_microbatches, virtual_stages, st.adjusted, st.recompute
    where = interleaved_stage_to_device(p, v)
    rows = interleaved_zb_rows(p, m, v)
    lam = resolve_swap_blocks(swap_blocks, swap_fraction, rows, sorted({where[s] for s in adj}))
    return assemble_devices("interleaved-zb", m, add_swaps(rows, lam), where, adj, rec, swap_fraction)
