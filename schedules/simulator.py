"""Simulation of a schedule under a StageCosts cost model: the per-kind table
(schedules/actions.py: what each action waits on, its lane, its duration, its
memory effect) priced for the schedule, run by the list scheduler
(schedules/scheduling/list_schedule.py) with every device issuing its row in order. Each
device has a compute stream (the F, B, I and W of all its stages) and two host
links (SO and SI, one at a time each, full duplex, apart from compute); since each
runs in row order, every start is the longest path to it in the dependency graph.

An overlapped pair (Schedule.overlapped: torch's `(a;b)OVERLAP_F_B`, DualPipeV) is
one unit on the compute stream: it starts when both halves' inputs are there (torch
receives both before the call), its halves run back to back (a's time, then b's:
overlapping hides communication inside the chunks, e.g. MoE all-to-all, which this
model has none of, not compute), and both outputs leave at the unit's end (torch
sends them after the call).

Realism terms (StageCosts; fitted by schedules.calibration from engine runs):
every F, B, I, W takes `action_overhead` longer (launch and dispatch); a p2p
transfer next to a swapping stage gets `1 - link_sharing` of the link (its copies
share it); `iteration_time` adds the optimizer step after the flush (per device, the
sum over its stages). `on_one_device` merges a schedule's rows into one device's
row (what the engine runs when every stage shares one GPU), in simulated start order.
Memory: the one fold (schedules.memory) over the simulated ops.
"""
from __future__ import annotations

from schedules.actions import StagePrice, boundary_lags, priced, swapping_stages
from schedules.costs import StageCosts
from schedules.deps import dependency_map
from schedules.errors import ScheduleError
from schedules.ir import Action, Schedule, StageSpec
from schedules.scheduling.list_schedule import list_schedule
from schedules.memory import StageMemory
from schedules.scheduling.order_walk import merge_in_start_order
from schedules.timeline import OpRecord, Span, Timeline, held_bytes_peaks
from schedules.validator import validate


def price_schedule(schedule: Schedule, costs: StageCosts):
    """The per-kind table (schedules.actions) applied to `schedule`'s rows under
    `costs`: what the list scheduler runs to simulate it."""
    p = schedule.num_stages
    if costs.num_stages != p:
        raise ScheduleError(f"costs describe {costs.num_stages} stages, schedule {schedule.name!r} has {p}")
    stages = [StagePrice(costs, s, spec.adjusted, spec.swap_fraction) for s, spec in enumerate(schedule.stages)]
    return priced(schedule.rows, p, schedule.stage_to_device, stages,
                  boundary_lags(costs, swapping_stages(schedule.stages)), schedule.overlapped)


def op_times(schedule: Schedule, costs: StageCosts, check: bool = True
             ) -> dict[Action, tuple[float, float, float]]:
    """(start, end, recompute part) of every action. `check=False` skips validation
    for callers that just generated the schedule (a search loop, say)."""
    _, times = row_times(schedule, costs, check)
    return {a: t for row, ts in zip(schedule.rows, times) for a, t in zip(row, ts)}


def row_times(schedule: Schedule, costs: StageCosts, check: bool = True
              ) -> tuple[tuple[tuple[Action, ...], ...], list[list[tuple[float, float, float]]]]:
    """op_times row by row: each row's actions and (start, end, recompute part), in
    row order: the list scheduler (schedules.scheduling.list_schedule) with every device
    issuing its row in order."""
    if check:
        validate(schedule)
    run = price_schedule(schedule, costs)
    done = list_schedule(run)
    if not done.complete:  # validate() rules this out; keep the loop honest anyway
        raise ScheduleError(f"schedule {schedule.name!r} cannot make progress")
    span, rec = done.span, run.rec
    return schedule.rows, [[(*span(i), rec[i]) for i in ids] for ids in run.rows]


def makespan(schedule: Schedule, costs: StageCosts, check: bool = True) -> float:
    """Just the iteration time (no Timeline statistics): for search loops."""
    return max((e for _, e, _ in op_times(schedule, costs, check).values()), default=0.0)


def iteration_time(schedule: Schedule, costs: StageCosts, check: bool = True) -> float:
    """The makespan plus the optimizer step after the flush: each device steps its
    stages in turn, devices in parallel (StageCosts.optimizer; 0 when not given)."""
    opt = [0.0] * schedule.num_devices
    for s, d in enumerate(schedule.stage_to_device):
        opt[d] += costs.optimizer_time(s)
    return makespan(schedule, costs, check) + max(opt)


def on_one_device(schedule: Schedule, costs: StageCosts) -> Schedule:
    """`schedule` with every stage on device 0, the row merging the stages' own
    orders by simulated start time (ties: lower stage first): one GPU running a
    pipeline's stages one after another, as the engine does on a shared device.

        dev0: F0 F1 B1 B0        dev0: 0F0 1F0 0F1 1F1 1B0 0B0 ...
        dev1:  F0 F1 B0 B1  ->   (one row, each stage keeps its own order)
    """
    times = op_times(schedule, costs)
    # the one order walker (schedules.scheduling.order_walk) over the stages' own orders
    row = merge_in_start_order([st.actions for st in schedule.stages], dependency_map(schedule),
                               {a: t[0] for a, t in times.items()})
    stages = tuple(StageSpec((), st.recompute, st.swap_fraction, st.swap_blocks) for st in schedule.stages)
    return Schedule(f"{schedule.name} (one device)", schedule.num_stages, schedule.num_microbatches, stages,
                    (0,) * schedule.num_stages, (tuple(row),))


def stage_memory(schedule: Schedule, costs: StageCosts) -> tuple[StageMemory, ...]:
    """What each stage's ops allocate and free under `costs` (schedules.memory)."""
    p = schedule.num_stages
    out = []
    for s, spec in enumerate(schedule.stages):
        adj = spec.adjusted
        out.append(StageMemory(
            kept=costs.kept_bytes(s, adj), swap_fraction=spec.swap_fraction,
            remat=max(0.0, costs.act_bytes[s] - costs.act_bytes_recompute[s]) if adj else 0.0,
            freed_by_input_grad=costs.input_grad_frees(s),
            held_for_weight_grad=costs.weight_grad_held_bytes(s),
            inbox_input=costs.boundary_bytes[s - 1] if s > 0 else 0.0,
            inbox_grad=costs.boundary_bytes[s] if s < p - 1 else 0.0))
    return tuple(out)


def simulate(schedule: Schedule, costs: StageCosts, check: bool = True) -> Timeline:
    """Simulate `schedule` under `costs` and derive every statistic (see timeline.py);
    `check=False` as for op_times."""
    return Timeline.from_ops(schedule.num_stages, _records(schedule, costs, check), name=schedule.name,
                             origin=0.0, stage_to_device=schedule.stage_to_device,
                             memory=stage_memory(schedule, costs))


def held_peaks(schedule: Schedule, costs: StageCosts, check: bool = True) -> tuple[float, tuple[float, ...]]:
    """(makespan, each device's peak_held_bytes) of simulate(schedule, costs),
    without its other statistics: what a search compares."""
    rows, times = row_times(schedule, costs, check)
    make = tuple.__new__    # Span's fields in order, without NamedTuple's keyword handling: a search builds millions
    spans = [make(Span, (t[0], t[1], a[0], str(a), a[1], a[2], None))
             for row, trow in zip(rows, times) for a, t in zip(row, trow)]
    return held_bytes_peaks(schedule.num_stages, spans, stage_memory(schedule, costs), schedule.stage_to_device)


def _records(schedule: Schedule, costs: StageCosts, check: bool) -> list[OpRecord]:
    times = op_times(schedule, costs, check)
    return [OpRecord.of(a, *times[a]) for row in schedule.rows for a in row]
