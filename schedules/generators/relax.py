"""Dependency relaxation: per-stage orders built by list scheduling under a cost model.

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
from schedules.errors import ScheduleError
from schedules.ir import Action, Kind


def relaxed_rows(num_stages: int, num_microbatches: int, fixed: dict[int, list[Action]],
                 caps: dict[int, int], costs: StageCosts, adjusted) -> tuple[list[list[Action]], float]:
    """Orders for all stages (fixed ones unchanged, the `caps` ones relaxed) and
    their makespan under `costs` (adjusted stages' backwards include recompute)."""
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

    def ready_at(s: int, is_f: bool, x: int):
        if is_f:
            if s == 0:
                return 0.0
            e = end_f[s - 1][x]
            return None if e is None else e + lag[s - 1]
        if s == p - 1:
            return end_f[s][x]
        e = end_b[s + 1][x]
        return None if e is None else e + lag[s]

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
