"""Zero-bubble schedules (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR'24):
the backward splits into I, the input gradient the upstream stage waits for, and W,
the weight gradient nobody waits for, so W can fill bubbles.

zb-h1 (the paper's ZB-H1, one stage per device): torch's ScheduleInterleavedZeroBubble
order with one stage per rank (interleaved_zb.py, V = 1). Stage s warms up with
p-1-s forwards, then runs (F, I) pairs, each W delayed by s pairs, then drains
with I and the W owed. Memory rule: stage s holds at most p-s micro-batches until
their I but up to p until their W (the later stages keep their W for the bubbles);
stage 0 holds p, 1F1B's stage-0 peak, so with I freeing what W does not need the
peak is 1F1B's. With f = i = w = 1 and p = 4, m = 8: 27 = 1F1B's 33 less 2(p-1),
a bubble of p-1 = a third of 1F1B's 3(p-1) (the optimum without a cap, an exact
CP-SAT solve in the tests); p = 8, m = 32: 103.

    stage 0 |FFFF...IWFIWFIWFIWFIWIWIWIW|
            |0123   00411522633744556677|
    stage 1 |.FFF..IFIWFIWFIWFIWFIWIWIWW|
            | 012  031042153264375465767|
    stage 2 |..FF.IFIFIWFIWFIWFIWFIWIWWW|
            |  01 0213204315426537647567|
    stage 3 |...FIFIFIFIWFIWFIWFIWFIWWWW|
            |   001122330441552663774567|

zb-h1-capped (the former zb-h1): stage s warms up with c_s = min(p-s, m) forwards,
then runs I(x) W(x) F(x+c_s), then drains with I(x) W(x). A micro-batch's residuals
stay live until its W, so stage s holds at most p-s micro-batches until their W,
as in 1F1B. What it buys: stage s-1's I waits only for stage s's I, not for its
W, so every stage on the backward chain sheds a W and W runs while the stage waits
for its next gradient. With f = i = w = 1 and p = 4, m = 8: 30 where 1F1B
(b = i + w) takes 33; 30 is the optimum under the p-s cap (CP-SAT, in the tests).

    stage 0 |FFFF...IWFIWFIWFIWFIW.IW.IW.IW|
            |0123   00411522633744 55 66 77|
    stage 1 |.FFF..IWFIWFIWFIWFIWFIW.IW.IW.|
            | 012  00311422533644755 66 77 |
    stage 2 |..FF.IWFIWFIWFIWFIWFIWFIW.IW..|
            |  01 00211322433544655766 77  |
    stage 3 |...FIWFIWFIWFIWFIWFIWFIWFIW...|
            |   000111222333444555666777   |

zb-h2 (the paper's ZB-H2, one stage per device): more warm-up forwards than 1F1B
so that no stage idles before its first I, and W moved to the tail, which turns
the trapezoid into a parallelogram. The first gradient reaches stage s at
2p-1-s (unit costs), so stage s warms up with 2(p-s)-1 forwards (2p-1 on stage
0, where the paper's (2p-1) M_B peak sits); then it runs 2s pairs (I, F) keeping
their W, so that every stage holds 2p-1 blocks until their W, then triples
(I, W, F), then (I, W), then the 2s W still owed. The paper (section 2.2) fixes
the warm-up, the peak and the parallelogram; this interleaving after the warm-up
is one that meets them (the authors' code builds ZB-2p with its heuristic, not a
handcrafted ZB-H2). Peak: at most 2p-1 micro-batches on every stage
between F and W, the paper's (2p-1) M_B (about twice 1F1B's p M_B; with M_W <
M_B only stage 0, whose W follow their I at once, reaches it). With f = i = w = 1
and m >= 2p-1 (stage 0's warm-up) every stage runs without a gap from its first F
to its last W (3m: the paper's zero bubble), and for m >= p the makespan is
3m + p - 1, the bound no order beats under a synchronous optimizer step (the last
stage cannot start before p-1); ZB-H1 reaches it too at these costs, but each of
its stages idles p-1-s. p = 4, m = 8: 27:

    stage 0 |FFFFFFFIWFIWIWIWIWIWIWIW...|
            |012345600711223344556677   |
    stage 1 |.FFFFFIFIFIWFIWIWIWIWIWWW..|
            | 012340516207314253647567  |
    stage 2 |..FFFIFIFIFIFIWFIWIWIWWWWW.|
            |  012031425364075162734567 |
    stage 3 |...FIFIFIFIFIFIFIWFIWWWWWWW|
            |   001122334455660771234567|

zb-v (the paper's ZB-V): two chunks per device in a V: chunk 0 of device d is
stage d, chunk 1 is stage 2p-1-d, so the forward runs down the devices and back up
and the loss is on device 0. Device d warms up with 2(p-d)-1 chunk-0 forwards,
then d pairs (chunk-1 F, chunk-0 F), then p-d triples (chunk-1 F, I, W); the steady
phase repeats (chunk-0 F, I, W, chunk-1 F, I, W); the drain runs d pairs of
chunk-0/chunk-1 I, then p-d (chunk-0 I, W), then the W still owed. (The order of
the paper's Fig. 8; torch's ScheduleZBVZeroBubble builds the same.) Device d holds
at most 2p blocks (stage, micro-batch) of half a device's layers each: p micro-
batches' worth, 1F1B's stage-0 peak, on every device. With each chunk at f = i =
w = 1 (a device's work per micro-batch 6), p = 4, m = 8: makespan 51 = 48 + 3:

    device 0 |FFFFFFFFIWFIWFIWFIWFIWFIWIWFIWIWFIWIWFIWIWIWIWIW...|
             |012345600011122233370044411555226663377744556677   |
             |000000077777777777700077700777007770077700000000   |
    device 1 |.FFFFFFFFIWFIWFIWFIWFIWFIWFIWIWFIWIWFIWIIIWIWIWWW..|
             | 012340510021132260043371154422655337664754657677  |
             | 111116166666666611166611166611666116661611111161  |
    device 2 |..FFFFFFFFIWFIWFIWFIWFIWFIWFIWFIWIWFIWIIIIIWIWWWWW.|
             |  012031420031150042261153372264433755465764756767 |
             |  222525255555522255522255522255522555252522225522 |
    device 3 |...FFFFFFFFIWFIWFIWFIWFIWFIWFIWFIWFIWIIIIIIIWWWWWWW|
             |   001122330040041151152262263373374445566774567567|
             |   343434344433344433344433344433344434343433444333|
"""
from __future__ import annotations

from schedules.generators.common import assemble, assemble_devices, setup
from schedules.generators.interleaved_zb import torch_rank_row
from schedules.generators.swap import add_swaps, resolve_swap_blocks, swapped_schedule
from schedules.ir import Action, Kind, Schedule


def zb_h1_row(stage: int, num_microbatches: int, warmup: int) -> list[Action]:
    """`warmup` forwards, then I(x) W(x) F(x + warmup), then I(x) W(x)."""
    m, s = num_microbatches, stage
    c = max(1, min(warmup, m))
    row = [Action(s, Kind.F, x) for x in range(c)]
    for x in range(m):
        row += [Action(s, Kind.I, x), Action(s, Kind.W, x)]
        if x + c < m:
            row.append(Action(s, Kind.F, x + c))
    return row


def zb_h1(num_stages: int, num_microbatches: int, *, adjusted=None, recompute=("full",), swap_blocks=0,
          swap_fraction: float = 0.0, costs=None) -> Schedule:
    """The paper's ZB-H1: torch's interleaved zero-bubble order with one stage per device."""
    st = setup(num_stages, num_microbatches, adjusted, recompute)
    p, m, adj, rec = st.num_devices, st.num_microbatches, st.adjusted, st.recompute
    rows = [torch_rank_row(s, p, m, 1, m, min(p - 1 - s, m), w_delay=s) for s in range(p)]
    lam = resolve_swap_blocks(swap_blocks, swap_fraction, rows, adj)
    return assemble("zb-h1", m, add_swaps(rows, lam), adj, rec, lam, swap_fraction)


def zb_h1_capped(num_stages: int, num_microbatches: int, *, adjusted=None, recompute=("full",), swap_blocks=0,
                 swap_fraction: float = 0.0, warmup=None, costs=None) -> Schedule:
    """ZB-H1 capped at p-s micro-batches until W; `warmup` (a per-stage tuple) overrides the min(p-s, m) warm-up forwards,
    which are also the micro-batches a stage holds until their W."""
    st = setup(num_stages, num_microbatches, adjusted, recompute, warmup=warmup)
    p, m, adj, rec = st.num_devices, st.num_microbatches, st.adjusted, st.recompute
    warmup = tuple(min(p - s, m) for s in range(p)) if st.warmup is None else st.warmup
    rows = [zb_h1_row(s, m, warmup[s]) for s in range(p)]
    lam = resolve_swap_blocks(swap_blocks, swap_fraction, rows, adj)
    return assemble("zb-h1-capped", m, add_swaps(rows, lam), adj, rec, lam, swap_fraction)


def zb_h2_row(stage: int, num_stages: int, num_microbatches: int) -> list[Action]:
    """2(p-s)-1 forwards, 2s pairs (I, F), triples (I, W, F), then (I, W) and the W owed."""
    p, m, s = num_stages, num_microbatches, stage
    F, I, W = Kind.F, Kind.I, Kind.W   # noqa: E741
    warm = min(2 * (p - s) - 1, m)
    row = [Action(s, F, x) for x in range(warm)]
    nxt = {F: warm, I: 0, W: 0}

    def step(kind: Kind) -> None:
        row.append(Action(s, kind, nxt[kind]))
        nxt[kind] += 1

    while nxt[F] < m:
        step(I)
        if nxt[I] > 2 * s:            # past the 2s pairs that keep their W
            step(W)
        step(F)
    while nxt[I] < m:
        step(I)
        step(W)
    while nxt[W] < m:
        step(W)
    return row


def zb_h2(num_stages: int, num_microbatches: int, *, adjusted=None, recompute=("full",), swap_blocks=0,
          swap_fraction: float = 0.0, costs=None) -> Schedule:
    """The paper's ZB-H2 (see the module docstring); `costs` is not read (a fixed order)."""
    st = setup(num_stages, num_microbatches, adjusted, recompute)
    rows = [zb_h2_row(s, st.num_devices, st.num_microbatches) for s in range(st.num_devices)]
    return swapped_schedule("zb-h2", st, rows, swap_blocks, swap_fraction)


def zb_v_stage_to_device(num_devices: int) -> tuple[int, ...]:
    """Stage s < p on device s, stage s >= p on device 2p-1-s (the V)."""
    p = num_devices
    return tuple(s if s < p else 2 * p - 1 - s for s in range(2 * p))


def zb_v_row(device: int, num_devices: int, num_microbatches: int) -> list[Action]:
    """Device d's order, built phase by phase; each phase is a pattern of (chunk,
    kind) steps repeated a number of times. Steps whose micro-batch would be >= m
    are skipped (the phases are sized for m >= 2p-1)."""
    p, m, d = num_devices, num_microbatches, device
    stage = (d, 2 * p - 1 - d)
    nxt = {(c, k): 0 for c in (0, 1) for k in (Kind.F, Kind.I, Kind.W)}
    row: list[Action] = []

    def step(chunk: int, kind: Kind) -> None:
        x = nxt[(chunk, kind)]
        nxt[(chunk, kind)] = x + 1
        if x < m:
            row.append(Action(stage[chunk], kind, x))

    F, I, W = Kind.F, Kind.I, Kind.W   # noqa: E741
    n = max(m, 2 * p - 1)
    for count, pattern in (
            (2 * (p - d) - 1, ((0, F),)),
            (d, ((1, F), (0, F))),
            (p - d, ((1, F), (1, I), (1, W)))):
        for _ in range(count):
            for chunk, kind in pattern:
                step(chunk, kind)
    while nxt[(0, F)] < n or nxt[(1, F)] < nxt[(0, F)]:
        if nxt[(0, F)] < n:
            step(0, F)
        for chunk, kind in ((0, I), (0, W), (1, F), (1, I), (1, W)):
            step(chunk, kind)
    for count, pattern in ((d, ((0, I), (1, I))), (p - d, ((0, I), (0, W)))):
        for _ in range(count):
            for chunk, kind in pattern:
                step(chunk, kind)
    for chunk in (1, 0):
        while nxt[(chunk, W)] < nxt[(chunk, I)]:
            step(chunk, W)
    return row


def zb_v(num_stages: int, num_microbatches: int, *, adjusted=None, recompute=("full",), swap_blocks=0,
         swap_fraction: float = 0.0, costs=None) -> Schedule:
    """`num_stages` is the pipeline depth p (devices); the schedule has 2p stages.
    `adjusted` names model stages (K: stages 0..K)."""
    st = setup(num_stages, num_microbatches, adjusted, recompute, stages_per_device=2)
    p, m, adj, rec = st.num_devices, st.num_microbatches, st.adjusted, st.recompute
    where = zb_v_stage_to_device(p)
    rows = [zb_v_row(d, p, m) for d in range(p)]
    lam = resolve_swap_blocks(swap_blocks, swap_fraction, rows, sorted({where[s] for s in adj}))
    return assemble_devices("zb-v", m, add_swaps(rows, lam), where, adj, rec, swap_fraction)
