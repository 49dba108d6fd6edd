"""Dependency relaxation of Obscura on 1F1B: orders built by list scheduling under a
cost model.

`relaxed_rows` (one stage per device, F and B only) is the paper's policy: a
relaxed stage alternates forward and backward and swaps the two when the preferred
one is late. (device_relax.py relaxes any schedule, chunks and split backwards: a
relaxed device runs the first action of its given row whose inputs are there.)
Both read the one dependency rule (schedules.deps).

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
import math

from schedules.costs import StageCosts
from schedules.deps import dependency_keys
from schedules.errors import ScheduleError
from schedules.ir import Action, Kind


def relaxed_rows(num_stages: int, num_microbatches: int, fixed: dict[int, list[Action]],
                 caps: dict[int, int], costs: StageCosts, adjusted, limit: float = math.inf
                 ) -> tuple[list[list[Action]], float]:
    """Orders for all stages (fixed ones unchanged, the `caps` ones relaxed) and
    their makespan under `costs` (adjusted stages' backwards include recompute).
    With a finite `limit` it stops as soon as the makespan is sure to exceed it (a
    stage's remaining work cannot end by then) and returns makespan inf.
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
    left = [m * (dur_f[s] + dur_b[s]) for s in range(p)]
    bound = limit * (1 + 1e-12) if math.isfinite(limit) else math.inf   # `left` is a running difference
    fixed_is_f = {s: [a.kind == Kind.F for a in row] for s, row in fixed.items()}
    cap = [caps.get(s, 0) for s in range(p)]
    events = [(0.0, s, s) for s in range(p)]
    seq = p
    # What (s, F or B, x) waits on, from the one rule (schedules.deps): rows here hold
    # F and B only, so the rule reads the same for every x; kept per stage as (the
    # end times it reads, lag).
    waits = {(s, is_f): tuple(((end_f if d[1] == "F" else end_b)[d[0]], lag[min(d[0], s)] if d[0] != s else 0.0)
                              for d in dependency_keys((s, "F" if is_f else "B", 0), (), p))
             for s in range(p) for is_f in (True, False)}
    pop, push = heapq.heappop, heapq.heappush
    placed = 0
    while events:
        t, _, s = pop(events)
        if t < free_at[s] or len(rows[s]) == 2 * m:
            continue
        if (t if t > free_at[s] else free_at[s]) + left[s] > bound:
            return rows, math.inf
        if s in fixed_is_f:
            kinds = fixed_is_f[s]
            i = len(rows[s])
            cands = (kinds[i],) if i < len(kinds) else ()
        else:               # True = forward; after a backward the forward is tried first
            nb, nf = next_b[s], next_f[s]
            can_b, can_f = nb < nf, nf < m and nf - nb < cap[s]
            cands = ((True, False) if not last_f[s] else (False, True)) if can_b and can_f else \
                (False,) if can_b else (True,) if can_f else ()
        chosen, soonest = None, math.inf
        for is_f in cands:
            x = next_f[s] if is_f else next_b[s]
            r = 0.0
            for ends, lg in waits[(s, is_f)]:
                e = ends[x]
                if e is None:
                    r = None
                    break
                if e + lg > r:
                    r = e + lg
            if r is not None:
                if r <= t:
                    chosen = is_f
                    break
                if r < soonest:
                    soonest = r
        if chosen is None:
            if soonest < math.inf:
                push(events, (soonest, seq, s))
                seq += 1
            continue  # otherwise woken when a dependency is placed
        if chosen:
            x = next_f[s]
            e = t + dur_f[s]
            end_f[s][x] = e
            next_f[s] += 1
            left[s] -= dur_f[s]
            other, wake = s + 1, e + (lag[s] if s < p - 1 else 0.0)
        else:
            x = next_b[s]
            e = t + dur_b[s]
            end_b[s][x] = e
            next_b[s] += 1
            left[s] -= dur_b[s]
            other, wake = s - 1, e + (lag[s - 1] if s > 0 else 0.0)
        rows[s].append(Action(s, Kind.F if chosen else Kind.B, x))
        last_f[s] = chosen
        free_at[s] = e
        placed += 1
        push(events, (e, seq, s))
        seq += 1
        if 0 <= other < p:
            push(events, (wake if wake > free_at[other] else free_at[other], seq, other))
            seq += 1
    if placed != 2 * m * p:
        raise ScheduleError(f"relaxed_rows: placed {placed} of {2 * m * p} actions (the fixed orders deadlock)")
    makespan = max(max(e for e in row if e is not None) for row in end_b)
    return rows, makespan
