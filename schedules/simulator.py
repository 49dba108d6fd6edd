"""Discrete-event simulation of a schedule under a StageCosts cost model.

Every device has three resources: its compute stream (the F, B, I and W of all its
stages, in row order), its host-out link (SO, one at a time) and its host-in link
(SI, one at a time); the links are full duplex and share nothing with compute. An
action starts at the latest of the ends of what it waits on (schedules.deps; plus a
p2p transfer, p2p_time of the boundary, when the producer runs on another device)
and of its resource:
  F, B, I, W   the previous compute op of its device ends
  SO           the host-out link is free; the compute op listed before it has ended
               (a swap is issued once the device reached its place)
  SI           the host-in link is free; the compute op listed before it has ended;
               the SO listed before it has ended ("evict one block before loading
               one", so the resident level never rises during eviction-loading)
Durations: F = fwd; B = bwd (+ recompute on adjusted stages); I = input_grad
(+ recompute); W = weight_grad (StageCosts.input_grad_time / weight_grad_time; a B
followed by a W of the same micro-batch, the older spelling of I, takes I's time);
SO/SI = swap_fraction * kept bytes / host bandwidth.

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

Because each resource runs its actions in row order, every start time is the
longest path to it in the dependency graph; the simulator walks devices in
dependency order and needs no event queue.
"""
from __future__ import annotations

from schedules.costs import StageCosts
from schedules.deps import dependency_waits
from schedules.errors import ScheduleError
from schedules.ir import Action, Kind, Schedule, StageSpec
from schedules.memory import StageMemory
from schedules.timeline import OpRecord, Span, Timeline, held_bytes_peaks
from schedules.validator import validate

_KIND_VALUE = {k: k.value for k in Kind}
_KIND = {k.value: k for k in Kind}


def op_times(schedule: Schedule, costs: StageCosts, check: bool = True
             ) -> dict[Action, tuple[float, float, float]]:
    """(start, end, recompute part) of every action. `check=False` skips validation
    for callers that just generated the schedule (a search loop, say)."""
    _, times = row_times(schedule, costs, check)
    return {a: t for row, ts in zip(schedule.rows, times) for a, t in zip(row, ts)}


def row_times(schedule: Schedule, costs: StageCosts, check: bool = True
              ) -> tuple[list[list[tuple]], list[list[tuple[float, float, float]]]]:
    """op_times row by row: each row's keys (stage, kind value, micro-batch) and
    (start, end, recompute part), in row order.
    Long: one loop keeps the four resources' rules side by side."""
    if check:
        validate(schedule)
    p = schedule.num_stages
    if costs.num_stages != p:
        raise ScheduleError(f"costs describe {costs.num_stages} stages, schedule {schedule.name!r} has {p}")
    rows = schedule.rows
    where = schedule.stage_to_device
    # hashable keys (stage, kind value, micro-batch) and, per action, what it waits on
    # with the transfer time from each (the one rule, schedules.deps)
    keys = [[(a.stage, _KIND_VALUE[a.kind], a.microbatch) for a in row] for row in rows]
    present = {k for row in keys for k in row}
    swaps = [spec.swap_fraction > 0 and any(a.kind is Kind.SO for a in spec.actions) for spec in schedule.stages]
    lags = [costs.p2p_time(s, swaps[s] or (s + 1 < p and swaps[s + 1])) for s in range(p)]
    waits = dependency_waits(present, p, where, lags)
    split = {(s, x) for s, k, x in present if k == "W"}
    # durations per stage, summed as (time + recompute) + overhead
    stages, overhead = schedule.stages, costs.action_overhead
    rec = [costs.recompute[s] if stages[s].adjusted else 0.0 for s in range(p)]
    dur_f = [costs.fwd[s] + overhead for s in range(p)]
    dur_w = [costs.weight_grad_time(s) + overhead for s in range(p)]
    dur_half = [(costs.input_grad_time(s) + rec[s]) + overhead for s in range(p)]   # I, or a B that a W follows
    dur_full = [(costs.bwd[s] + rec[s]) + overhead for s in range(p)]
    dur_swap = [costs.swap_time(s, stages[s].swap_fraction, stages[s].adjusted) for s in range(p)]
    end: dict[tuple, float] = {}
    pair = {(a.stage, _KIND_VALUE[a.kind], a.microbatch): (b.stage, _KIND_VALUE[b.kind], b.microbatch)
            for a, b in schedule.overlapped}
    n = len(rows)
    times: list[list[tuple[float, float, float]]] = [[] for _ in range(n)]
    ptr = [0] * n
    compute_end = [0.0] * n     # end of the last compute op issued on the device
    out_free = [0.0] * n
    in_free = [0.0] * n
    last_so_end = [0.0] * n
    remaining = sum(len(r) for r in rows)
    while remaining:
        progressed = False
        for d, row in enumerate(rows):
            krow, mine = keys[d], times[d]
            i, size = ptr[d], len(row)
            while i < size:
                key = krow[i]
                if key in pair:
                    if not _run_pair(key, pair[key], waits, end, compute_end, d, mine,
                                     _durations(pair[key], dur_f, dur_w, dur_half, dur_full, rec, split),
                                     _durations(key, dur_f, dur_w, dur_half, dur_full, rec, split)):
                        break
                    i += 2
                    continue
                ready = 0.0
                for dep, lag in waits[key]:
                    e = end.get(dep)
                    if e is None:
                        ready = None
                        break
                    if e + lag > ready:
                        ready = e + lag
                if ready is None:
                    break
                s, k, x = key
                r = 0.0
                if k == "SO":
                    dur = dur_swap[s]
                    start = max(ready, out_free[d], compute_end[d])
                    out_free[d] = last_so_end[d] = start + dur
                elif k == "SI":
                    dur = dur_swap[s]
                    start = max(ready, in_free[d], compute_end[d], last_so_end[d])
                    in_free[d] = start + dur
                else:
                    start = ready if ready > compute_end[d] else compute_end[d]
                    if k == "F":
                        dur = dur_f[s]
                    elif k == "W":
                        dur = dur_w[s]
                    else:
                        r = rec[s]
                        dur = dur_half[s] if k == "I" or (s, x) in split else dur_full[s]
                    compute_end[d] = start + dur
                end[key] = start + dur
                mine.append((start, start + dur, r))
                i += 1
            if i != ptr[d]:
                remaining -= i - ptr[d]
                ptr[d] = i
                progressed = True
        if not progressed:  # validate() rules this out; keep the loop honest anyway
            raise ScheduleError(f"schedule {schedule.name!r} cannot make progress")
    return keys, times


def _durations(key, dur_f, dur_w, dur_half, dur_full, rec, split) -> tuple[float, float]:
    """(duration, recompute part) of compute action `key`."""
    s, k, x = key
    if k == "F":
        return dur_f[s], 0.0
    if k == "W":
        return dur_w[s], 0.0
    return (dur_half[s] if k == "I" or (s, x) in split else dur_full[s]), rec[s]


def _run_pair(first, second, waits, end, compute_end, d, mine, dur_second, dur_first) -> bool:
    """Issue an overlapped pair as one unit (module docstring); False if an input is
    still missing."""
    ready = compute_end[d]
    for dep, lag in waits[first] + waits[second]:
        if dep in (first, second):
            continue
        e = end.get(dep)
        if e is None:
            return False
        ready = max(ready, e + lag)
    mid = ready + dur_first[0]
    stop = mid + dur_second[0]
    end[first] = end[second] = compute_end[d] = stop
    mine.append((ready, mid, dur_first[1]))
    mine.append((mid, stop, dur_second[1]))
    return True


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
    heads = [0] * schedule.num_stages
    row = []
    for _ in range(sum(len(st.actions) for st in schedule.stages)):
        s = min((s for s in range(schedule.num_stages) if heads[s] < len(schedule.stages[s].actions)),
                key=lambda s: (times[schedule.stages[s].actions[heads[s]]][0], s))
        row.append(schedule.stages[s].actions[heads[s]])
        heads[s] += 1
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
    keys, times = row_times(schedule, costs, check)
    spans = [Span(t[0], t[1], s, f"{k}{x}", _KIND[k], x)
             for krow, trow in zip(keys, times) for (s, k, x), t in zip(krow, trow)]
    return held_bytes_peaks(schedule.num_stages, spans, stage_memory(schedule, costs), schedule.stage_to_device)


def _records(schedule: Schedule, costs: StageCosts, check: bool) -> list[OpRecord]:
    times = op_times(schedule, costs, check)
    return [OpRecord.of(a, *times[a]) for row in schedule.rows for a in row]
