"""Dependency relaxation: orders built by list scheduling under a cost model.

Two policies. `relaxed_rows` (Obscura on 1F1B, one stage per device, F and B only)
is the paper's: a relaxed stage alternates forward and backward and swaps the two
when the preferred one is late. `relaxed_device_rows` relaxes any schedule (chunks,
split backwards): a relaxed device runs the first action of its given row whose
inputs are there. Both read the one dependency rule (schedules.deps).

relaxed_rows:

A relaxed stage, whenever it is free, prefers the kind it did not run last (1:1
interleaving of forwards and backwards, as 1F1B, so downstream stages keep getting
forwards and memory stays bounded). If the preferred op's input has not arrived
it runs the other kind instead: a later forward moves left into the bubble before
a backward that is still waiting (and that backward moves right), provided fewer
than `cap` micro-batches are in flight. Warm-up is the same rule from the start:
forwards until the first gradient arrives or the cap is reached.
Other stages keep their given order. Times are not stored: the output is a plain
static order, and the simulator recomputes times under any cost model. With the
same costs, the simulated times equal the ones computed here (both are list
schedules of the same order), so the returned makespan can steer searches.
"""
from __future__ import annotations

import heapq

from schedules.costs import StageCosts
from schedules.deps import dependency_keys, key_lag
from schedules.errors import ScheduleError
from schedules.ir import Action, Kind, Schedule


def relaxed_rows(num_stages: int, num_microbatches: int, fixed: dict[int, list[Action]],
                 caps: dict[int, int], costs: StageCosts, adjusted) -> tuple[list[list[Action]], float]:
    """Orders for all stages (fixed ones unchanged, the `caps` ones relaxed) and
    their makespan under `costs` (adjusted stages' backwards include recompute).
    Long: one event loop with the candidate rule inline."""
    p, m = num_stages, num_microbatches
    if set(fixed) | set(caps) != set(range(p)) or set(fixed) & set(caps):
        raise ScheduleError("relaxed_rows: every stage needs exactly one of a fixed order or a cap")
    if any(a.kind not in (Kind.F, Kind.B) for row in fixed.values() for a in row):
        raise ScheduleError("relaxed_rows: fixed orders may hold only F and B actions")
    adjusted = set(adjusted)
    dur_f = [costs.fwd[s] for s in range(p)]
    dur_b = [costs.backward_time(s, s in adjusted) for s in range(p)]
    lag = [costs.p2p_time(s) for s in range(p)]
    end_f = [[None] * m for _ in range(p)]
    end_b = [[None] * m for _ in range(p)]
    rows: list[list[Action]] = [[] for _ in range(p)]
    free_at = [0.0] * p
    next_f = [0] * p
    next_b = [0] * p
    last_f = [True] * p           # kind run last: prefer the other one
    events = [(0.0, s, s) for s in range(p)]
    seq = p

    # What (s, F or B, x) waits on, from the one rule (schedules.deps): rows here hold
    # F and B only, so the rule reads the same for every x; keep its shape per stage.
    waits = {(s, is_f): [(d[0], d[1] == "F", lag[min(d[0], s)] if d[0] != s else 0.0)
                         for d in dependency_keys((s, "F" if is_f else "B", 0), (), p)]
             for s in range(p) for is_f in (True, False)}

    def ready_at(s: int, is_f: bool, x: int):
        """When (s, F or B, x)'s inputs are there, None if unknown yet."""
        ready = 0.0
        for ds, d_is_f, lg in waits[(s, is_f)]:
            e = (end_f if d_is_f else end_b)[ds][x]
            if e is None:
                return None
            ready = max(ready, e + lg)
        return ready

    def candidates(s: int) -> list[bool]:      # True = forward
        if s in fixed:
            row = fixed[s]
            i = len(rows[s])
            return [row[i].kind == Kind.F] if i < len(row) else []
        out = []
        if next_b[s] < next_f[s]:
            out.append(False)
        if next_f[s] < m and next_f[s] - next_b[s] < caps[s]:
            out.append(True)
        if len(out) == 2 and not last_f[s]:
            out.reverse()           # ran a backward last: try the forward first
        return out

    placed = 0
    while events:
        t, _, s = heapq.heappop(events)
        if t < free_at[s] or len(rows[s]) == 2 * m:
            continue
        cands = candidates(s)
        chosen, known = None, []
        for is_f in cands:
            x = next_f[s] if is_f else next_b[s]
            r = ready_at(s, is_f, x)
            if r is not None and r <= t:
                chosen = is_f
                break
            if r is not None:
                known.append(r)
        if chosen is None:
            if known:
                heapq.heappush(events, (min(known), seq, s))
                seq += 1
            continue  # otherwise woken when a dependency is placed
        if chosen:
            x = next_f[s]
            e = t + dur_f[s]
            end_f[s][x] = e
            next_f[s] += 1
            other, wake = s + 1, e + (lag[s] if s < p - 1 else 0.0)
        else:
            x = next_b[s]
            e = t + dur_b[s]
            end_b[s][x] = e
            next_b[s] += 1
            other, wake = s - 1, e + (lag[s - 1] if s > 0 else 0.0)
        rows[s].append(Action(s, Kind.F if chosen else Kind.B, x))
        last_f[s] = chosen
        free_at[s] = e
        placed += 1
        heapq.heappush(events, (e, seq, s))
        seq += 1
        if 0 <= other < p:
            heapq.heappush(events, (max(wake, free_at[other]), seq, other))
            seq += 1
    if placed != 2 * m * p:
        raise ScheduleError(f"relaxed_rows: placed {placed} of {2 * m * p} actions (the fixed orders deadlock)")
    makespan = max(max(e for e in row if e is not None) for row in end_b)
    return rows, makespan


def relaxed_device_rows(base: Schedule, caps: dict[int, int], costs: StageCosts
                        ) -> tuple[list[list[Action]], float] | None:
    """Dependency relaxation of any schedule (chunks, split backwards), by list
    scheduling under `costs`: devices not in `caps` keep their row; a device in `caps`,
    whenever it is free, runs the first action of its row (in the row's order) whose
    inputs have arrived, keeping each stage's forwards, backward-input steps and
    weight-grads in micro-batch order, and starting a forward only while fewer than
    caps[d] blocks (stage, micro-batch) are held (forwarded, not yet freed by their W,
    or B). A late backward thus lets a later forward or a W move left into its
    bubble. Rows must hold compute actions only (swaps are added after). Returns the
    rows and their makespan (what the simulator gives them under the same costs), or
    None if the caps deadlock.

    A relaxed device's candidates are the heads of its queues (stage x F / B-or-I /
    W), in row order; a placed action wakes its own device and the devices whose
    actions wait on it (nothing else can change what a device may start). Events at
    one time commute while durations are positive; with zero-length actions ties go
    by event order.
    Long: one event loop keeps both device kinds."""
    p = base.num_stages
    where = base.stage_to_device
    rows = base.rows
    n = len(rows)
    if any(not a.is_compute for row in rows for a in row):
        raise ScheduleError("relaxed_device_rows: rows may hold compute actions only (add swaps afterwards)")
    keys = [[(a.stage, a.kind.value, a.microbatch) for a in row] for row in rows]
    present = {k for row in keys for k in row}
    split = {(s, x) for s, k, x in present if k == "W"}
    lags = [costs.p2p_time(s) for s in range(p)]
    adjusted = set(base.adjusted_stages)
    deps: dict[tuple, tuple] = {}
    dur: dict[tuple, float] = {}
    woken: dict[tuple, list[int]] = {}
    for d, krow in enumerate(keys):
        for key in krow:
            on = dependency_keys(key, present, p)
            deps[key] = tuple((dk, key_lag(dk, key, where, lags)) for dk in on)
            for dk in on:
                woken.setdefault(dk, []).append(d)
            dur[key] = _relaxed_duration(key, costs, adjusted, split)
    woken = {k: tuple(sorted(set(v))) for k, v in woken.items()}
    frees = {key: key[1] == "W" or (key[1] == "B" and (key[0], key[2]) not in split) for key in present}
    # a relaxed device's queues: [row indices in order, position of the head]
    queues: dict[int, list[list]] = {}
    for d in caps:
        by_queue: dict[tuple, list[int]] = {}
        for i, (s, k, _) in enumerate(keys[d]):
            by_queue.setdefault((s, "BI" if k in ("B", "I") else k), []).append(i)
        queues[d] = [[idx, 0] for idx in by_queue.values()]
    end: dict[tuple, float] = {}

    def ready_at(key) -> float | None:
        r = 0.0
        for dep, lg in deps[key]:
            e = end.get(dep)
            if e is None:
                return None
            if e + lg > r:
                r = e + lg
        return r

    out: list[list[Action]] = [[] for _ in range(n)]
    ptr = [0] * n
    free_at = [0.0] * n
    held = [0] * n
    events = [(0.0, d, d) for d in range(n)]
    seq = n
    placed, total = 0, len(present)
    while events:
        t, _, d = heapq.heappop(events)
        if t < free_at[d]:
            continue
        chosen = queue = None
        known = []
        if d in queues:
            for i, q in sorted((q[0][q[1]], q) for q in queues[d] if q[1] < len(q[0])):
                key = keys[d][i]
                if key[1] == "F" and held[d] >= caps[d]:
                    continue
                r = ready_at(key)
                if r is not None and r <= t:
                    chosen, queue = i, q
                    break
                if r is not None:
                    known.append(r)
        elif ptr[d] < len(keys[d]):
            r = ready_at(keys[d][ptr[d]])
            if r is not None and r <= t:
                chosen = ptr[d]
            elif r is not None:
                known.append(r)
        if chosen is None:
            if known:
                heapq.heappush(events, (min(known), seq, d))
                seq += 1
            continue    # otherwise woken when something it waits on is placed
        if queue is None:
            ptr[d] += 1
        else:
            queue[1] += 1
        key = keys[d][chosen]
        e = t + dur[key]
        end[key] = e
        out[d].append(rows[d][chosen])
        placed += 1
        free_at[d] = e
        if key[1] == "F":
            held[d] += 1
        elif frees[key]:
            held[d] -= 1
        heapq.heappush(events, (e, seq, d))
        seq += 1
        for other in woken.get(key, ()):
            if other != d:
                heapq.heappush(events, (max(e, free_at[other]), seq, other))
                seq += 1
    if placed != total:
        return None
    return out, max(end.values(), default=0.0)


def _relaxed_duration(key: tuple, costs: StageCosts, adjusted: set[int], split: set[tuple[int, int]]) -> float:
    s, k, x = key
    if k == "F":
        return costs.fwd[s]
    if k == "W":
        return costs.weight_grad_time(s)
    rec = costs.recompute[s] if s in adjusted else 0.0
    half = k == "I" or (s, x) in split
    return (costs.input_grad_time(s) if half else costs.bwd[s]) + rec
