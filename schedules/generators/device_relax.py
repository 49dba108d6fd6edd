"""Dependency relaxation of any schedule (chunks, split backwards): the device rows
Obscura on interleaved 1F1B and on ZB-H1 run (generators/obscura_on.py).

List scheduling under a cost model: devices not capped keep their row; a capped
device, whenever it is free, runs the first action of its row (in the row's order)
whose inputs have arrived, keeping each stage's forwards, backward-input steps and
weight-grads in micro-batch order, and starting a forward only while fewer than its
cap of blocks (stage, micro-batch) are held (forwarded, not yet freed by their W,
or B). A late backward thus lets a later forward or a W move left into its bubble.
Dependencies are the one rule (schedules.deps).

`DeviceRelaxation(base, costs)` does the set-up once (keys, dependencies, lags,
durations) and relaxes under any caps: the cap search (generators/caps.py) runs it
dozens of times per schedule. Inside, a capped device's candidates are the heads of
its queues (stage x F / B-or-I / W), kept sorted by row position; a placed action
wakes its own device and the devices whose actions wait on it (nothing else can
change what a device may start). Events at one time commute while durations are
positive; with zero-length actions ties go by event order.
"""
from __future__ import annotations

import bisect
import heapq
import math

from schedules.costs import StageCosts
from schedules.deps import dependency_waits
from schedules.errors import ScheduleError
from schedules.ir import Action, Schedule

_SLACK = 1e-12   # relative: a bound computed by subtraction may sit an ulp above the true finish


class DeviceRelaxation:
    """The relaxation of `base` (compute actions only: swaps are added after) under
    `costs`; call it with caps {device: blocks}."""

    def __init__(self, base: Schedule, costs: StageCosts) -> None:
        rows = base.rows
        if any(not a.is_compute for row in rows for a in row):
            raise ScheduleError("device relaxation: rows may hold compute actions only (add swaps afterwards)")
        p, where = base.num_stages, base.stage_to_device
        keys = [(a.stage, a.kind.value, a.microbatch) for row in rows for a in row]
        index = {k: i for i, k in enumerate(keys)}
        present = index.keys()
        split = {(s, x) for s, k, x in keys if k == "W"}
        lags = [costs.p2p_time(s) for s in range(p)]
        adjusted = set(base.adjusted_stages)
        self.rows = rows
        self.n = len(rows)
        self.ids = []                      # per device: the action ids of its row, in order
        self.device_of = [0] * len(keys)
        start = 0
        for d, row in enumerate(rows):
            self.ids.append(list(range(start, start + len(row))))
            for i in range(start, start + len(row)):
                self.device_of[i] = d
            start += len(row)
        self.actions = [a for row in rows for a in row]
        waits = dependency_waits(present, p, where, lags)
        self.deps = [tuple((index[dk], lag) for dk, lag in waits[k]) for k in keys]
        woken: list[set[int]] = [set() for _ in keys]
        for i, on in enumerate(self.deps):
            for j, _ in on:
                woken[j].add(self.device_of[i])
        self.woken = [tuple(sorted(w - {self.device_of[j]})) for j, w in enumerate(woken)]
        self.dur = [_duration(k, costs, adjusted, split) for k in keys]
        self.is_f = [k[1] == "F" for k in keys]
        self.frees = [k[1] == "W" or (k[1] == "B" and (k[0], k[2]) not in split) for k in keys]
        # per device: its queues' action ids in row order
        self.queues = []
        for d, row in enumerate(rows):
            by_queue: dict[tuple, list[int]] = {}
            for pos, i in enumerate(self.ids[d]):
                s, k, _ = keys[i]
                by_queue.setdefault((s, "BI" if k in ("B", "I") else k), []).append(pos)
            self.queues.append(list(by_queue.values()))

    def __call__(self, caps: dict[int, int], limit: float = math.inf
                 ) -> tuple[list[list[Action]], float] | None:
        """(rows, makespan: what the simulator gives them under the same costs), or
        None if the caps deadlock, or once the makespan is sure to exceed `limit`
        (a device's remaining work cannot end by then).
        Long: one event loop, its candidate rule inline (the hot path of the cap search)."""
        n, ids, deps, dur, is_f, frees, woken = self.n, self.ids, self.deps, self.dur, self.is_f, self.frees, self.woken
        end: list[float | None] = [None] * len(dur)
        out: list[list[Action]] = [[] for _ in range(n)]
        left = [sum(dur[i] for i in ids[d]) for d in range(n)]
        bound = limit * (1 + _SLACK) if math.isfinite(limit) else math.inf
        # per device: its queues (a device kept as it is has one: its whole row), the
        # heads sorted by row position, each queue's head; its cap (none when kept)
        queues = [self.queues[d] if d in caps else [list(range(len(ids[d])))] for d in range(n)]
        heads = [sorted((q[0], j) for j, q in enumerate(queues[d]) if q) for d in range(n)]
        qpos = [[0] * len(queues[d]) for d in range(n)]
        cap = [caps.get(d, math.inf) for d in range(n)]
        free_at = [0.0] * n
        held = [0] * n
        events = [(0.0, d, d) for d in range(n)]
        seq = n
        placed, total = 0, len(dur)
        pop, push = heapq.heappop, heapq.heappush
        while events:
            t, _, d = pop(events)
            if t < free_at[d]:
                continue
            if (t if t > free_at[d] else free_at[d]) + left[d] > bound:
                return None
            chosen = slot = None
            soonest = math.inf
            row_ids, cap_full = ids[d], held[d] >= cap[d]
            for slot_j, (pos, _) in enumerate(heads[d]):
                i = row_ids[pos]
                if cap_full and is_f[i]:
                    continue
                r = 0.0
                for j, lg in deps[i]:
                    e = end[j]
                    if e is None:
                        r = None
                        break
                    if e + lg > r:
                        r = e + lg
                if r is not None:
                    if r <= t:
                        chosen, slot = i, slot_j
                        break
                    if r < soonest:
                        soonest = r
            if chosen is None:
                if soonest < math.inf:
                    push(events, (soonest, seq, d))
                    seq += 1
                continue    # otherwise woken when something it waits on is placed
            _, qj = heads[d].pop(slot)
            qpos[d][qj] += 1
            queue = queues[d][qj]
            if qpos[d][qj] < len(queue):
                bisect.insort(heads[d], (queue[qpos[d][qj]], qj))
            e = t + dur[chosen]
            end[chosen] = e
            left[d] -= dur[chosen]
            out[d].append(self.actions[chosen])
            placed += 1
            free_at[d] = e
            if is_f[chosen]:
                held[d] += 1
            elif frees[chosen]:
                held[d] -= 1
            push(events, (e, seq, d))
            seq += 1
            for other in woken[chosen]:
                push(events, (e if e > free_at[other] else free_at[other], seq, other))
                seq += 1
        if placed != total:
            return None
        return out, max((e for e in end if e is not None), default=0.0)


def _duration(key: tuple, costs: StageCosts, adjusted: set[int], split: set[tuple[int, int]]) -> float:
    s, k, x = key
    if k == "F":
        return costs.fwd[s]
    if k == "W":
        return costs.weight_grad_time(s)
    rec = costs.recompute[s] if s in adjusted else 0.0
    half = k == "I" or (s, x) in split
    return (costs.input_grad_time(s) if half else costs.bwd[s]) + rec
