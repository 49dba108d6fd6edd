"""V-shape schedules with controllable memory (Qi, Wan, Amar, Lin, "Pipeline
Parallelism with Controllable Memory", NeurIPS'24, arXiv 2405.15362): v-half and
v-min. Device d holds two chunks in a V, as zb-v (the paper's V-ZB) does: chunk 0
is stage d, chunk 1 stage 2p-1-d.

A schedule repeats a building block: device d's slots, on a clock where each
chunk's F, I and W take 1, of one micro-batch's F0, F1, I1, I0 (chunk 0's forward,
chunk 1's forward, then the backwards in the reverse order) and the two W; micro-
batch x runs them 6x later. Adjacent devices' slots differ by the paper's uniform
offsets (section 3.1: F0 +1 or +2, F1 -1, I1 +1 or +2, I0 -1 per device), the
numbers of the authors' code (zbv_greedy.py, stable_pattern_v_min / _v_half):

    v-min   F0 = d,   F1 = 2p-1-d,  I1 = 2p+e+d,    I0 = 4p+e-1-d,  e = 2 if 3 | p else 0
    v-half  F0 = 2d,  F1 = 3p-2-d,  I1 = 3p+e-1+2d, I0 = 6p+e-2-d,  e = 3 if 2 | p else 0

(e keeps the four slots of every device apart modulo 6), each W in the first slot
free after its I, modulo 6 (the building block of the authors' v_auto_schedule.py,
fill_w_in_building_block; chunk 1's W placed first). A block (stage, micro-batch)
lives from its F to its W, and the repeated blocks overlap to 2 floor((p+4)/3)
chunk blocks on a device for V-Min and 2 floor((p+2)/2) for V-Half (the paper's
Table, in micro-batches: floor((p+4)/3) and floor((p+2)/2) micro-batches' worth of
one device's activations, each chunk block half of it), against 1F1B's p on stage
0: about a third and a half. The relaxation below never holds more blocks than
the repeated order, so that is each device's peak once m >= p, counted by the
memory fold in the tests for p up to 8, blocks held whole until W (M_W = M_B;
with M_W < M_B less).

Repeating, squeezing, reordering (the paper's framework): the repeated blocks,
micro-batches >= m dropped, give each device's order (`repeated_rows`); the
simulator squeezes it (every action as early as its inputs and its device allow,
order kept); then the order is relaxed at these unit costs (device_relax.py: a
device, when free, runs the first action of its order whose inputs are there,
its forwards of both chunks kept in order, never holding more blocks than the
repeated order does) and the relaxed order is kept when it is not slower. The
order does not depend on `costs` (the authors' code builds V-Min and V-Half at
unit costs too). Not done: the paper's warm-up rule (forwards up to the peak
before the first I) and its greedy cool-down reordering; the relaxation covers
part of what they gain (p = 4, m = 8: V-Half's bubble is 11 here where the paper
puts it at about half of 1F1B's 18; V-Min's 11, about 2/3 of 1F1B's, as the
paper's).

p = 4, m = 8, each chunk f = i = w = 1 (a device's work per micro-batch 6, 48 in
all; 1F1B takes 66, zb-v 51). V-Half, at most 3 micro-batches' worth on a device
(1F1B: 4):

    device 0 |FF.....FFIWFFIW.FFIIWFWFIIWFWFIIWFWFIIWFWIIWWFIWIW..IW...IW|
             |01     02001311 2402230513341624452735563646477755  66   77|
             |00     70777077 7007770007770007770007770707077700  00   00|
    device 1 |.FF...F..FFIWFIFWIWFFIWIWFFIWIWFFIWIWFFIWIWIFW.IWIWIW...IW.|
             | 01   0  2100312100432211543322654433765544676 557766   77 |
             | 11   6  1666166611166611166611166611166611666 116611   11 |
    device 2 |..F..FF..FF.IWFFIIWFWFIIWFWFIIWFWFIIWFWFIIWFWIIWW.IIWW.IW..|
             |  0  01  12 0023011304122415233526344637455746565 6776 77  |
             |  2  52  52 5552255522255522255522255522255525252 2552 22  |
    device 3 |...FF..FF..FFIWIWFFIWIWFFIWIWFFIWIWFFIWIWFFIWIWIWIW.IWIW...|
             |   00  11  2200003311114422225533336644447755556666 7777   |
             |   34  34  3444333444333444333444333444333444334433 4433   |

V-Min, at most 2 micro-batches' worth:

    device 0 |FF.....FIWF..FIIWWFFIIWWFFIIWWFFIIWWFFIIWWFFIIWW.FIIWW...IW|
             |01     0002  11010322121433232544343655454766565 77676   77|
             |00     7770  77070077070077070077070077070077070 77070   00|
    device 1 |.F....FF.IW.FFIIWWFFIIWWFFIIWWFFIIWWFFIIWWFFIIWWF.IIWW..IW.|
             | 0    01 00 1201102312213423324534435645546756657 6776  77 |
             | 1    61 66 6116616116616116616116616116616116616 1661  11 |
    device 2 |..F..F..F.IFWIFWIFWIFWIFWIFWIFWIFWIFWIFWIFWIFWIFWIW.IW.IW..|
             |  0  0  1 01002012113123224234335345446456557567666 77 77  |
             |  2  5  2 55522255522255522255522255522255522255522 55 22  |
    device 3 |...FF....FFIIWWFFIIWWFFIIWWFFIIWWFFIIWWFFIIWWFFIIWW..IIWW..|
             |   00    110000221111332222443333554444665555776666  7777  |
             |   34    344343344343344343344343344343344343344343  4343  |
"""
from __future__ import annotations

from dataclasses import dataclass

from schedules.costs import StageCosts
from schedules.errors import ScheduleError
from schedules.generators.caps import held_peaks
from schedules.generators.common import Setup, assemble_devices, setup
from schedules.generators.device_relax import DeviceRelaxation
from schedules.generators.swap import swapped_schedule
from schedules.generators.zero_bubble import zb_v_stage_to_device
from schedules.ir import Action, Kind, Schedule
from schedules.simulator import makespan

PERIOD = 6      # a micro-batch's F, I and W of both chunks, on the unit clock
_TOL = 1e-9


@dataclass(frozen=True)
class BuildingBlock:
    """Device d's slots on the unit clock for micro-batch 0 (x runs 6x later):
    `forward`, `input_grad` and `weight_grad` per chunk (0: stage d; 1: 2p-1-d)."""
    forward: tuple[int, int]
    input_grad: tuple[int, int]
    weight_grad: tuple[int, int]

    def slots(self) -> tuple[tuple[int, int, Kind], ...]:
        """(slot, chunk, kind) of the six actions."""
        return tuple((t, c, k) for k, ts in ((Kind.F, self.forward), (Kind.I, self.input_grad),
                                             (Kind.W, self.weight_grad)) for c, t in enumerate(ts))


def building_block(name: str, num_devices: int, device: int) -> BuildingBlock:
    """The V-Min or V-Half block of `device` (module docstring)."""
    p, d = num_devices, device
    if name == "v-min":
        e = 2 if p % 3 == 0 else 0
        f0, f1, i1, i0 = d, 2 * p - 1 - d, 2 * p + e + d, 4 * p + e - 1 - d
    elif name == "v-half":
        e = 3 if p % 2 == 0 else 0
        f0, f1, i1, i0 = 2 * d, 3 * p - 2 - d, 3 * p + e - 1 + 2 * d, 6 * p + e - 2 - d
    else:
        raise ScheduleError(f"no V-shape building block named {name!r} (v-min, v-half)")
    used = {f0 % PERIOD, f1 % PERIOD, i1 % PERIOD, i0 % PERIOD}
    w = {}
    for chunk, slot in ((1, i1), (0, i0)):     # each W in the first free slot after its I
        gap = next(g for g in range(1, PERIOD) if (slot + g) % PERIOD not in used)
        used.add((slot + gap) % PERIOD)
        w[chunk] = slot + gap
    return BuildingBlock((f0, f1), (i0, i1), (w[0], w[1]))


def repeated_rows(name: str, num_devices: int, num_microbatches: int) -> list[list[Action]]:
    """Every device's order: its block repeated every 6 slots for micro-batches
    0..m-1, in slot order (slots on a device never coincide)."""
    p, m = num_devices, num_microbatches
    rows = []
    for d in range(p):
        stages = (d, 2 * p - 1 - d)       # zb_v_stage_to_device's V
        slots = building_block(name, p, d).slots()
        timed = sorted((t + PERIOD * x, Action(stages[c], k, x)) for x in range(m) for t, c, k in slots)
        rows.append([a for _, a in timed])
    return rows


def v_rows(name: str, st: Setup) -> list[list[Action]]:
    """The repeated order, relaxed at unit costs under the blocks it holds, when
    that is not slower (module docstring)."""
    rows = repeated_rows(name, st.num_devices, st.num_microbatches)
    base = assemble_devices(name, st.num_microbatches, rows, zb_v_stage_to_device(st.num_devices), (), ("full",))
    unit = StageCosts.uniform(st.num_stages, 1.0, 2.0, 0.0)
    held = held_peaks(rows)
    found = DeviceRelaxation(base, unit, merge_forwards=True)(dict(enumerate(held)))
    if found is None or found[1] > makespan(base, unit, check=False) * (1 + _TOL):
        return rows
    return found[0]


def _v(name: str, num_stages: int, num_microbatches: int, adjusted, recompute, swap_blocks,
       swap_fraction: float) -> Schedule:
    st = setup(num_stages, num_microbatches, adjusted, recompute, stages_per_device=2)
    return swapped_schedule(name, st, v_rows(name, st), swap_blocks, swap_fraction,
                            zb_v_stage_to_device(st.num_devices))


def v_half(num_stages: int, num_microbatches: int, *, adjusted=None, recompute=("full",), swap_blocks=0,
           swap_fraction: float = 0.0, costs=None) -> Schedule:
    """V-Half: about half of 1F1B's activation memory. `num_stages` is the pipeline
    depth p (devices); the schedule has 2p stages, which `adjusted` names (K:
    stages 0..K). `costs` is not read (the order is built at unit costs)."""
    return _v("v-half", num_stages, num_microbatches, adjusted, recompute, swap_blocks, swap_fraction)


def v_min(num_stages: int, num_microbatches: int, *, adjusted=None, recompute=("full",), swap_blocks=0,
          swap_fraction: float = 0.0, costs=None) -> Schedule:
    """V-Min: about a third of 1F1B's activation memory (see v_half for the arguments)."""
    return _v("v-min", num_stages, num_microbatches, adjusted, recompute, swap_blocks, swap_fraction)
