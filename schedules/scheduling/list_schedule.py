"""List scheduling: the one loop that gives actions their times, over the per-kind
table priced for a run (schedules.actions.priced). Its users differ only in the
chooser each device gets:

    in order (the default)  the device issues its row as given: the simulator
                            (schedules.simulator), the devices a relaxation keeps,
                            the measured timeline (obscura_jax.observe.events, with the
                            dispatch and ready times the engine observed)
    Relaxed                 whenever the device is free it starts the first of its
                            queues' heads, in its preference order, whose inputs have
                            arrived; a forward only while it holds fewer than `cap`
                            blocks (or, with `sizes`, an action only while what it
                            adds keeps the device within `cap`): the relaxations
                            (generators/relax.py: the paper's alternation;
                            generators/device_relax.py: row order), and so the cap
                            bisection (generators/caps.py) and the zero-bubble
                            heuristic under a memory limit (generators/zero_bubble_auto.py)

(Relaxed and the state the loop keeps for it live in schedules/scheduling/relaxed_chooser.py.)

An action starts at the latest of its inputs' ends (plus the transfer from another
device) and of its lane's rule (schedules/actions.py): compute runs in the order
placed, host links one copy at a time; with `row_rules` a swap also waits for the
compute op placed before it (an SI for the SO placed before it too). It ends
`dur` later, or, for a measured run, when the engine saw it ready.

Work that is not a pipeline action but holds a lane all the same (a measured
copy: obscura_jax.observe.events.infer_transfers; a stage's data-parallel sync:
planner.layouts.mesh_costs.gradient_sync_end) is a run of its own (`lane_run`): one
job at a time per lane, in row order, released when the caller says. A run that
cannot go on (every device waits on an action never placed) is not complete and
names what each device stopped at (`Run.waiting`): the validator's deadlock.

A run may start from `Known` times (an earlier run it matches up to a point: the
relaxations' cap search, generators/relaxation.py): those actions are placed as
given and the loop goes on from there, and may pause at a time (`until`). With a
finite `limit`, a device's check adds `tail`, a time the run must go on after any
of its actions ends (generators/relaxation.py's finish_tails: the least, over its
actions, of the longest chain of dependents after one), so a trial that cannot
meet the limit stops as soon as one device has lost more than its slack.

An in-order device's times are longest paths, whatever order the loop visits it in,
so such devices place every action whose inputs are known at once. A relaxed
device decides at a time: events (its own end, an input placed, the soonest time a
waiting head is ready) come in time order, and the in-order devices are caught up
before each, so every input that can be there by then is known. Events at one time
commute while durations are positive; with zero-length actions ties go by event
order.
"""
from __future__ import annotations

import functools
import heapq
import math
from dataclasses import dataclass, field
from typing import Sequence

from schedules.actions import COMPUTE, HOST_IN, HOST_OUT, LANES, Priced
from schedules.ir import Kind
from schedules.scheduling.relaxed_chooser import ChooserState, Relaxed, choose_fitting

__all__ = ["Known", "Relaxed", "Run", "lane_run", "list_schedule"]

_F = Kind.F
_SLACK = 1e-12   # relative: a bound computed by subtraction may sit an ulp above the true finish


@dataclass(frozen=True)
class Known:
    """Times a run already has: per device, the first `count[d]` actions of `order[d]`
    at `start`/`end` (lists indexed by action; other entries are not read), e.g. an
    earlier run's, which this one matches before time `at`; the loop places the
    rest from `at` on. Compute actions only, no overlapped pairs, no measured times."""
    start: Sequence[float]
    end: Sequence[float | None]
    order: Sequence[Sequence[int]]
    count: Sequence[int]
    at: float = 0.0


@dataclass
class Run:
    start: list[float]
    end: list[float]
    order: list[list[int]]     # per device, its action indices in the order placed
    complete: bool             # every action placed
    past_limit: bool = False   # stopped early: sure to end past the limit
    halves: dict[int, float] = field(default_factory=dict)   # an overlapped pair's first half: its own end
    paused: bool = False       # stopped at `until`
    stopped: float = math.inf  # paused or past the limit at this time: every action starting before it is placed
    waiting: tuple[int, ...] = ()   # not complete, not stopped: the actions the devices stopped at (_waiting)

    def span(self, i: int) -> tuple[float, float]:
        """(start, end) of action i as it ran: an overlapped pair's first half ends
        where the second starts, though its output leaves at the unit's end."""
        return self.start[i], self.halves.get(i, self.end[i])

    @functools.cached_property
    def makespan(self) -> float:
        if self.complete:
            return max(self.end, default=0.0)
        return max((e for e in self.end if e is not None), default=0.0)


def list_schedule(run: Priced, relaxed: dict[int, Relaxed] | None = None, limit: float = math.inf,
                  row_rules: bool = True, release: Sequence[float] | None = None,
                  observed_end: Sequence[float] | None = None, known: Known | None = None,
                  tail: Sequence[float] | None = None, until: float = math.inf) -> Run:
    """Times for every action of `run`. Devices in `relaxed` choose (Relaxed);
    the others issue their rows in order. With a finite `limit` the run stops, not
    complete, as soon as some device's remaining compute, plus its `tail` (a time
    the run must go on after any of its actions), cannot end by it. `release` (an
    action starts no earlier) and `observed_end` (it ends then, or at its start if
    later) describe a measured run; `known`, times placed before the loop starts
    (Known); `until`, a time the loop pauses at (before any relaxed device decides
    at it or later).
    Long: one loop keeps the lanes' rules and both choosers side by side, inline
    (the simulator and the cap search spend their time here)."""
    relaxed = relaxed or {}
    n, total = run.num_devices, len(run.actions)
    dur, deps, lane, woken, pair, kind, lag = run.dur, run.deps, run.lane, run.woken, run.pair, run.kind, run.lag
    out_free, in_free, last_so_end = [0.0] * n, [0.0] * n, [0.0] * n
    free: dict[tuple[int, str], float] = {}    # a caller's own lanes (lane_run), per (device, lane)
    bound = limit * (1 + _SLACK) if math.isfinite(limit) else math.inf
    timed = release is not None or observed_end is not None
    halves: dict[int, float] = {}
    state = [ChooserState(relaxed[d]) if d in relaxed else None for d in range(n)]
    if known is None:
        start: list[float] = [0.0] * total
        end: list[float | None] = [None] * total
        order: list[list[int]] = [[] for _ in range(n)]
        compute_end, ptr, placed = [0.0] * n, [0] * n, 0
        left = [sum(dur[i] for i in row if lane[i] == COMPUTE) for row in run.rows]
    else:
        if run.pair or timed:
            raise ValueError("list_schedule: known times are for compute-only runs without pairs or measured times")
        start, end, order, compute_end, left, ptr, placed = _from_known(run, known, state)
    at = now = 0.0 if known is None else known.at
    events = [(at if at > compute_end[d] else compute_end[d], d, d) for d in sorted(relaxed) if state[d] is not None]
    heapq.heapify(events)
    seq = n
    pending = [d for d in range(n) if state[d] is None]
    tail = tail or [0.0] * n
    pop, push = heapq.heappop, heapq.heappush
    while pending or events:
        if pending:     # an in-order device: place every head whose inputs are known
            d = pending.pop()
            row = run.rows[d]
            if ptr[d] < len(row) and compute_end[d] + left[d] + tail[d] > bound:   # one with work left
                return Run(start, end, order, False, True, halves, False, now)
            while ptr[d] < len(row):
                i = row[ptr[d]]
                if i in pair:
                    stop = _place_pair(i, pair[i], d, run, end, start, compute_end, left, order)
                    if stop is not None:
                        halves[i] = start[pair[i]]
                    if stop is None:
                        break
                    for other in woken[i] + woken[pair[i]]:
                        if state[other] is not None:
                            push(events, (stop if stop > compute_end[other] else compute_end[other], seq, other))
                            seq += 1
                        else:
                            pending.append(other)
                    placed += 2
                    ptr[d] += 2
                    continue
                r = 0.0
                for j, b in deps[i]:
                    e = end[j]
                    if e is None:
                        r = None
                        break
                    e += lag[b]
                    if e > r:
                        r = e
                if r is None:
                    break
                ln = lane[i]
                if ln == COMPUTE and not timed:
                    st = r if r > compute_end[d] else compute_end[d]
                    e = compute_end[d] = end[i] = st + dur[i]
                    left[d] -= dur[i]
                else:
                    st, e = _place_other(i, d, r, ln, dur, compute_end, out_free, in_free, last_so_end, free,
                                         left, row_rules, release, observed_end)
                    end[i] = e
                start[i] = st
                order[d].append(i)
                placed += 1
                ptr[d] += 1
                for other in woken[i]:
                    if state[other] is not None:
                        push(events, (e if e > compute_end[other] else compute_end[other], seq, other))
                        seq += 1
                    else:
                        pending.append(other)
            continue
        t, _, d = pop(events)     # a relaxed device at time t
        now = t
        if t >= until:
            return Run(start, end, order, False, False, halves, True, t)
        free = compute_end[d]
        if t < free:
            continue
        if t + left[d] + tail[d] > bound:
            return Run(start, end, order, False, True, halves, False, t)
        ch = state[d]
        chosen = slot = None
        soonest = math.inf
        if ch.fits:
            chosen, slot, ready, soonest = choose_fitting(ch, t, kind, deps, end, lag, dur)
        else:
            cap_full = ch.held >= ch.cap
            sizes = ch.sizes
            k = -1
            for i, _ in ch.candidates():
                k += 1
                if sizes is None:
                    if cap_full and kind[i] is _F:
                        continue
                elif ch.held + sizes[i][0] > ch.cap:
                    continue
                r = 0.0
                for j, b in deps[i]:
                    e = end[j]
                    if e is None:
                        r = None
                        break
                    e += lag[b]
                    if e > r:
                        r = e
                if r is not None:
                    if r <= t:
                        chosen, slot, ready = i, k, r
                        break
                    if r < soonest:
                        soonest = r
        if chosen is None:
            if soonest < math.inf:
                push(events, (soonest, seq, d))
                seq += 1
            continue    # otherwise woken when something it waits on is placed
        ch.take(slot, chosen, kind[chosen])
        st = ready if ready > free else free
        e = compute_end[d] = end[chosen] = st + dur[chosen]
        start[chosen] = st
        left[d] -= dur[chosen]
        order[d].append(chosen)
        placed += 1
        push(events, (e, seq, d))
        seq += 1
        for other in woken[chosen]:
            if state[other] is not None:
                push(events, (e if e > compute_end[other] else compute_end[other], seq, other))
                seq += 1
            else:
                pending.append(other)
    if placed == total:
        return Run(start, end, order, True, False, halves)
    return Run(start, end, order, False, False, halves, waiting=_waiting(run, ptr, state))


def _waiting(run: Priced, ptr: list[int], state: list) -> tuple[int, ...]:
    """What a run that could not go on stopped at (every device idle, nothing left
    to wake it): an in-order device's next action in its row, a relaxed device's
    queues' heads; device by device. The deadlock check reads it (schedules.validator)."""
    out: list[int] = []
    for d, row in enumerate(run.rows):
        if state[d] is None:
            out.extend(row[ptr[d]:ptr[d] + 1])
        else:
            out.extend(q[0] for q in state[d].rest() if q)
    return tuple(out)


def lane_run(rows: Sequence[Sequence[object]], lane: str, dur: Sequence[float] | None = None) -> Priced:
    """A run of work that is not a pipeline action but holds a lane all the same
    (a measured copy, a data-parallel collective): per row (a device of the run, one
    lane of `lane` each) its jobs in the order the lane runs them, as labels
    (`Priced.actions`). A job waits on nothing but its lane's previous job; what else
    holds it back is list_schedule's `release`. `dur`: in rows' order (zeros when
    list_schedule gets `observed_end`)."""
    if lane in LANES:
        raise ValueError(f"lane_run: {lane!r} is a lane of the per-kind table, with rules of its own")
    labels = tuple(job for row in rows for job in row)
    ids, first = [], 0
    for row in rows:
        ids.append(tuple(range(first, first + len(row))))
        first += len(row)
    total = len(labels)
    return Priced(labels, (None,) * total, tuple(ids), tuple(d for d, row in enumerate(rows) for _ in row),
                  (lane,) * total, ((),) * total, ((),) * total, {},
                  [0.0] * total if dur is None else list(dur), [0.0] * total, [0.0])


def _from_known(run: Priced, known: Known, state: list) -> tuple:
    """The loop's state with `known`'s actions placed: a device whose order is all
    known is done (no chooser, its row issued); another resumes after its prefix.
    Copies whichever side is smaller: the known actions, or the rest blanked."""
    dur, total, n = run.dur, len(run.actions), run.num_devices
    prefixes = [o if c == len(o) else o[:c] for o, c in zip(known.order, known.count)]
    placed = sum(map(len, prefixes))
    if 2 * placed < total:
        start, end = [0.0] * total, [None] * total
        for prefix in prefixes:
            for i in prefix:
                start[i], end[i] = known.start[i], known.end[i]
    else:
        start, end = list(known.start), list(known.end)
    order, compute_end, left, ptr = [], [0.0] * n, [0.0] * n, [0] * n
    for d, row in enumerate(run.rows):
        prefix = prefixes[d]
        if prefix:
            compute_end[d] = end[prefix[-1]]
        if len(prefix) == len(row):
            order.append(known.order[d])
            ptr[d], state[d] = len(row), None
            continue
        order.append(list(prefix))
        left[d] = sum(map(dur.__getitem__, row)) - sum(map(dur.__getitem__, prefix))
        if state[d] is None:
            ptr[d] = len(prefix)      # an in-order device's order is its row
            rest = (row[len(prefix):],)
        else:
            state[d].resume(prefix, run.kind)
            rest = state[d].rest()
        if 2 * placed >= total:       # the arrays were copied whole: blank what is left to place
            for ids in rest:
                if ids and ids[-1] - ids[0] == len(ids) - 1:     # a run of indices (a row's, a stage's F or B)
                    end[ids[0]:ids[-1] + 1] = [None] * len(ids)
                else:
                    for i in ids:
                        end[i] = None
    return start, end, order, compute_end, left, ptr, placed


def _place_other(i, d, r, ln, dur, compute_end, out_free, in_free, last_so_end, free, left, row_rules, release,
                 observed_end) -> tuple[float, float]:
    """(start, end) of an action on a host link, of a job on a caller's lane
    (lane_run: one at a time, in row order), or of any action of a measured run,
    and its lane's new state."""
    if ln == COMPUTE:
        s = r if r > compute_end[d] else compute_end[d]
    elif ln == HOST_OUT:
        s = max(r, out_free[d], compute_end[d]) if row_rules else max(r, out_free[d])
    elif ln == HOST_IN:
        s = max(r, in_free[d], compute_end[d], last_so_end[d]) if row_rules else max(r, in_free[d])
    else:
        s = max(r, free.get((d, ln), 0.0))
    if release is not None and release[i] > s:
        s = release[i]
    e = s + dur[i] if observed_end is None else max(observed_end[i], s)
    if ln == COMPUTE:
        compute_end[d] = e
        left[d] -= dur[i]
    elif ln == HOST_OUT:
        out_free[d] = last_so_end[d] = e
    elif ln == HOST_IN:
        in_free[d] = e
    else:
        free[d, ln] = e
    return s, e


def _place_pair(first, second, d, run, end, start, compute_end, left, order) -> float | None:
    """Place an overlapped pair as one unit on the compute lane: it starts when both
    halves' inputs are there, runs a's time then b's, and both end together (the
    unit's end, returned). None if an input is still missing."""
    ready = compute_end[d]
    for j, b in run.deps[first] + run.deps[second]:
        if j in (first, second):
            continue
        e = end[j]
        if e is None:
            return None
        ready = max(ready, e + run.lag[b])
    mid = ready + run.dur[first]
    stop = mid + run.dur[second]
    start[first], start[second] = ready, mid
    end[first] = end[second] = compute_end[d] = stop
    left[d] -= run.dur[first] + run.dur[second]
    order[d].extend((first, second))
    return stop
