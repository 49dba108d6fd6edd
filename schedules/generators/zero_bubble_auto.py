"""The zero-bubble paper's automatic schedule under a memory limit (Qi et al., ICLR'24,
section 3): ZB-1p at 1F1B's activation memory (p M_B per device), ZB-2p at twice.

Inputs, per stage: T_F, T_I (with recompute on an adjusted stage), T_W and the p2p
time, from `costs` (the per-kind table, schedules/actions.py: action_overhead
included, links next to a swapping stage shared), else the paper's unit costs
f = 1, b = 2 (I = W = 1), r = 1. Memory is the paper's model as the one fold counts
it (schedules.memory): F adds M_B (the stage's kept bytes), I frees M_B - M_W and W
the rest, M_W being StageCosts.weight_grad_held when measured, else the block less
freed_by_input_grad (on a recomputing stage I also re-materialises what recompute
dropped, until W). Without activation bytes in the costs (none given, or act_bytes
all 0) a block counts 1 from its F to its W.

The heuristic, as the paper describes it, on the one list scheduler
(schedules.scheduling.list_schedule): every stage is a relaxed device whose queues are its
forwards, its I and its W, each in micro-batch order; when free it starts the
first ready one in the order of a preference row (`lead_row`: `lead` forwards, then
pairs (I, F), with the W after everything or each W(x) right after I(x + s), as
ZB-H1 delays them):
  warm-up  forwards as long as the first gradient has not arrived and the limit
           allows one more;
  steady   F and I alternate as in 1F1B, an I first whenever its gradient is there;
  W        fills the gaps, and runs whenever the next F would break the limit (an
           F starts only while the device stays within it); the W left after the
           last I run at the end.
An F is charged its block plus the largest rise of an I above it, so the device can
always run its oldest I: no deadlock under any limit that holds one block and its I
(a W frees nothing an I needs). The paper's binary switches are Relaxed.fits: a W
only in a gap it fits (it would delay no F or I that can be ready sooner; it still
runs when the limit holds an F back), and a warm-up forward that would delay the
first I waits. Its grid search becomes one over the lead (1F1B's p-s, ZB-H2's
2(p-s)-1, every forward first: as many as the limit allows), the W placement and
the switches (none, W, W and F): 18 runs, the fastest under `costs` wins (ties: the
first, the smallest lead). Its makespan is the simulator's on the rows it returns.
Not done: the paper's rule that still puts a W into a gap shorter than T_W when that
gap would grow the largest stage bubble, its switch that skips a forward on stage
s when s runs more than one ahead of s+1 (both in the authors' zb.py), and the ILP
that refines the heuristic's order. The optimizer step stays synchronous (the
paper's post-validation rollback is not modelled). It is not always faster than
ZB-H1, which fits ZB-1p's limit: on one sample of 150 random heterogeneous costs
(p 2-6, m 1-16, f in [0.5, 1.5], b = f x [1.5, 2.5], p2p, M_W < M_B, no
recompute) ZB-1p was 0.4% faster on average and at most 6% slower, and ZB-2p never
slower than ZB-H2.

`zb_auto(p, m, memory_limit=..., costs=...)` is the general form a planner calls:
`memory_limit` is what each device may hold, in the fold's units under `costs`
(bytes when the costs carry act_bytes: the simulator's peak_activation_bytes; else
blocks: peak_inflight_microbatches), one number or one per device. The swap pass
(swap_blocks, swap_fraction) runs after and only lowers what is resident.

With f = i = w = 1, no communication, blocks held until W (M_W = M_B), p = 4,
m = 8: ZB-1p (4 blocks) and ZB-2p (8 blocks) both take 27, ZB-H1's and ZB-H2's
makespan, the bound under a synchronous step (3m + p - 1); ZB-1p:

    stage 0 |FFFF...IWFIWFIWFIWFIWIWIWIW|
            |0123   00411522633744556677|
    stage 1 |.FFFF.IWIWFIWFIWFIWFIWIWIW.|
            | 0123 00114225336447556677 |
    stage 2 |..FFFIFIWIWFIWFIWFIWFIWIWW.|
            |  012031021432543654765767 |
    stage 3 |...FIFIFIFIWFIWFIWFIWFIWWWW|
            |   001122330441552663774567|

ZB-2p holds up to 2p blocks and runs its stages without a gap once started:

    stage 0 |FFFFFFFIFIWIWIWIWIWIWIWW...|
            |012345607102132435465767   |
    stage 1 |.FFFFFIFIFIFIWIWIWIWIWWWW..|
            | 012340516273041526374567  |
    stage 2 |..FFFIFIFIFIFIFIWIWIWWWWWW.|
            |  012031425364750617234567 |
    stage 3 |...FIFIFIFIFIFIFIFIWWWWWWWW|
            |   001122334455667701234567|
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Sequence

from schedules.costs import StageCosts
from schedules.errors import ScheduleError
from schedules.generators.common import Setup, assemble, setup
from schedules.generators.device_relax import DeviceRelaxation
from schedules.generators.swap import swap_intent, swapped_schedule
from schedules.ir import Action, Kind, Schedule
from schedules.memory import StageMemory, block_levels
from schedules.simulator import stage_memory

_TOL = 1e-9
# the paper's binary switches, as the kinds that start only in a gap they fit (Relaxed.fits):
# none; W only where it does not delay an F or I; also no forward that delays an I
SWITCHES = (frozenset(), frozenset({Kind.W}), frozenset({Kind.W, Kind.F}))


@dataclass(frozen=True)
class BlockCharge:
    """What one micro-batch's block costs a stage under the limit: an F adds
    `forward` (and is charged `forward + input_rise` so the oldest I always fits),
    an I rises `input_rise` above the level before it and leaves `input_net`
    more, a W frees what is left (`forward + input_net`)."""
    forward: float
    input_rise: float
    input_net: float

    @classmethod
    def of(cls, memory: StageMemory) -> "BlockCharge":
        (after_f,), after_i, _ = block_levels(memory)
        return cls(after_f, max(0.0, max(after_i) - after_f), after_i[-1] - after_f)

    def sizes(self, stage: int, num_microbatches: int) -> dict[Action, tuple[float, float]]:
        """Action -> (rise, net): the chooser's charges (schedules.scheduling.list_schedule.Relaxed)."""
        out = {}
        for x in range(num_microbatches):
            out[Action(stage, Kind.F, x)] = (self.forward + self.input_rise, self.forward)
            out[Action(stage, Kind.I, x)] = (self.input_rise, self.input_net)
            out[Action(stage, Kind.W, x)] = (0.0, -(self.forward + self.input_net))
        return out


def charges(base: Schedule, costs: StageCosts) -> tuple[BlockCharge, ...]:
    """Each stage's BlockCharge under `costs`: bytes as the fold counts them, or one
    block from F to W when the costs carry no activation bytes."""
    if any(costs.act_bytes):
        return tuple(BlockCharge.of(st) for st in stage_memory(base, costs))
    return (BlockCharge(1.0, 0.0, 0.0),) * base.num_stages


def lead_row(stage: int, num_microbatches: int, lead: int, w_delay: int | None = None) -> list[Action]:
    """The preference order: `lead` forwards, pairs (I, F), the remaining I, then
    every W; with `w_delay` each W(x) right after I(x + w_delay) instead."""
    m = num_microbatches
    w = max(1, min(lead, m))
    row = [Action(stage, Kind.F, x) for x in range(w)]
    for x in range(m):
        row.append(Action(stage, Kind.I, x))
        if w_delay is not None and x >= w_delay:
            row.append(Action(stage, Kind.W, x - w_delay))
        if w + x < m:
            row.append(Action(stage, Kind.F, w + x))
    done = m - w_delay if w_delay is not None and m > w_delay else 0
    return row + [Action(stage, Kind.W, x) for x in range(done, m)]


def candidate_leads(num_stages: int, num_microbatches: int) -> list[tuple[int, ...]]:
    """The grid: 1F1B's p-s, ZB-H2's 2(p-s)-1, every forward first (m); distinct ones."""
    p, m = num_stages, num_microbatches
    out: list[tuple[int, ...]] = []
    for lead in (tuple(min(p - s, m) for s in range(p)), tuple(min(2 * (p - s) - 1, m) for s in range(p)),
                 (m,) * p):
        if lead not in out:
            out.append(lead)
    return out


def _limits(memory_limit, num_stages: int) -> tuple[float, ...]:
    limit = memory_limit if isinstance(memory_limit, (tuple, list)) else (memory_limit,) * num_stages
    if len(limit) != num_stages or not all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                           and math.isfinite(v) and v >= 0 for v in limit):
        raise ScheduleError(f"memory_limit must be a number >= 0 or {num_stages} of them (one per device), "
                            f"got {memory_limit!r}")
    return tuple(float(v) for v in limit)


GRIDS = ("full", "quick")


def _grid(grid: str, num_stages: int, num_microbatches: int) -> tuple[list, tuple, tuple]:
    """(leads, W placements, switches) the heuristic tries: the paper's grid, or
    "quick" (a long pipeline's planner: every forward the limit allows, W after
    everything, W only in gaps it fits: one run)."""
    if grid not in GRIDS:
        raise ScheduleError(f"grid must be one of {', '.join(GRIDS)}, got {grid!r}")
    if grid == "quick":
        return [(num_microbatches,) * num_stages], (False,), (frozenset({Kind.W}),)
    return candidate_leads(num_stages, num_microbatches), (False, True), SWITCHES


def auto_rows(st: Setup, costs: StageCosts, memory_limit, swapping: Sequence[int] = (),
              swap_fraction: float = 0.0, grid: str = "full") -> tuple[list[list[Action]], float]:
    """Rows and makespan of the heuristic (module docstring) under `costs`, every
    device within its `memory_limit` (a number, a per-device tuple, or a function
    of the stages' BlockCharges giving one of those); `grid`: see _grid."""
    p, m = st.num_devices, st.num_microbatches
    if costs.num_stages != p:
        raise ScheduleError(f"costs describe {costs.num_stages} stages, the schedule has {p}")
    leads, delays, switches = _grid(grid, p, m)
    best = None
    for lead, delay in ((lead, delay) for lead in leads for delay in delays):
        base = assemble("zb-auto", m, [lead_row(s, m, lead[s], s if delay else None) for s in range(p)],
                        st.adjusted, st.recompute)
        if swapping:       # price the links of the stages that will swap as shared
            base = replace(base, stages=tuple(replace(spec, swap_fraction=swap_fraction, swap_blocks=1)
                                              if s in swapping else spec for s, spec in enumerate(base.stages)))
        charge = charges(base, costs)
        limit = _limits(memory_limit(charge) if callable(memory_limit) else memory_limit, p)
        for s, (c, lim) in enumerate(zip(charge, limit)):
            if c.forward + c.input_rise > lim * (1 + _TOL):
                raise ScheduleError(f"memory limit {lim:g} of device {s} holds less than one block and its "
                                    f"input-gradient step ({c.forward + c.input_rise:g})")
        sizes = {a: v for s, c in enumerate(charge) for a, v in c.sizes(s, m).items()}
        relax = DeviceRelaxation(base, costs)
        for fits in switches:
            found = relax({s: lim * (1 + _TOL) for s, lim in enumerate(limit)}, best[1] if best else math.inf,
                          sizes, fits)
            if found is not None and (best is None or found[1] < best[1] * (1 - _TOL)):
                best = found
    if best is None:    # the oldest I always fits, so a lead cannot deadlock; keep the loop honest anyway
        raise ScheduleError("zero-bubble heuristic: no order fits the memory limit")
    return best


def zb_auto(num_stages: int, num_microbatches: int, *, memory_limit=None, adjusted=None, recompute=("full",),
            swap_blocks=0, swap_fraction: float = 0.0, costs: StageCosts | None = None,
            name: str = "zb-auto", grid: str = "full") -> Schedule:
    """The heuristic under `memory_limit` per device (module docstring: bytes under
    `costs`, or blocks without activation bytes; None: 1F1B's, as ZB-1p). The
    planner gives each device's room left by its weights (planner.families)."""
    st = setup(num_stages, num_microbatches, adjusted, recompute)
    if memory_limit is None:
        memory_limit = times_1f1b(1, st.num_devices)
    costs = costs if costs is not None else StageCosts.uniform(st.num_devices, 1.0, 2.0, 1.0)
    rows, _ = auto_rows(st, costs, memory_limit, swap_intent(swap_blocks, swap_fraction, st.adjusted),
                        swap_fraction, grid)
    return swapped_schedule(name, st, rows, swap_blocks, swap_fraction)


def times_1f1b(factor: int, num_stages: int):
    """The limit `factor` x 1F1B's activation memory, p M_B on each device, plus
    room for one I's rise above it (a recomputing stage's re-materialised
    residuals, or a measured M_W above M_B), which 1F1B's full backward does not
    hold but a split one does. M_B is each device's own block: the paper's one
    M_limit = p M_B for every stage assumes even stages, where the two agree (the
    authors' code takes the largest of the first two stages' M_B)."""
    def limit(charge: Sequence[BlockCharge]) -> tuple[float, ...]:
        return tuple(factor * num_stages * c.forward + c.input_rise for c in charge)
    return limit


def zb_1p(num_stages: int, num_microbatches: int, *, adjusted=None, recompute=("full",), swap_blocks=0,
          swap_fraction: float = 0.0, costs: StageCosts | None = None) -> Schedule:
    """ZB-1p: the heuristic at 1F1B's activation memory (p M_B per device)."""
    return zb_auto(num_stages, num_microbatches, memory_limit=times_1f1b(1, num_stages), adjusted=adjusted,
                   recompute=recompute, swap_blocks=swap_blocks, swap_fraction=swap_fraction, costs=costs,
                   name="zb-1p")


def zb_2p(num_stages: int, num_microbatches: int, *, adjusted=None, recompute=("full",), swap_blocks=0,
          swap_fraction: float = 0.0, costs: StageCosts | None = None) -> Schedule:
    """ZB-2p: the heuristic at twice 1F1B's activation memory (2p M_B per device)."""
    return zb_auto(num_stages, num_microbatches, memory_limit=times_1f1b(2, num_stages), adjusted=adjusted,
                   recompute=recompute, swap_blocks=swap_blocks, swap_fraction=swap_fraction, costs=costs,
                   name="zb-2p")
