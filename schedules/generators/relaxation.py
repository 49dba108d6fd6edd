"""A relaxation under caps, run whole or near an earlier run: what the cap search
(generators/caps.py) costs.

`CappedRun(run, queues, alternate)` holds a priced run (schedules.actions) and, per
device that may be capped, the queues its chooser walks (schedules.scheduling.list_schedule:
Relaxed); `timed(caps, limit)` is the list scheduler's Run of those devices
relaxed under `caps` (the others issue their rows in order). The two relaxations
(relax.py: the paper's stage policy; device_relax.py: any schedule) are this with
queues of their own, and their results are read off its Runs.

A bisection trial differs from a run it already has (the last one that met its
target) by one device's smaller cap. `timed` starts such a trial from that run
instead of from nothing, and gives the same Run a whole one would (as far as the
trial decides: whether it ends by the limit, and if so every time), when every
compute action lasts a positive time (otherwise it runs whole):

  - before the cap binds, the trial is that run: up to the start of the first
    forward the earlier run placed while the device already held `cap` blocks
    (caps.first_over, the one memory fold over its order); if there is none, the
    cap never binds and the trial is that run;
  - after it, only devices whose inputs change can act differently. A device's
    choices depend on nothing but the times its inputs end (with positive
    durations every input that ends by a time is placed before the loop decides at
    that time, and a device decides whenever one of its queues' heads becomes
    ready). So the loop runs a group of devices with every other device's times
    known from the earlier run, and `_horizon` finds the first time an output
    leaving the group changes what its user does (an output later than before,
    but still before its user took it, changes nothing): before that time the run
    is exact, and with no such change it is the trial. The group is the capped
    device, for about a round trip through the pipeline, then to the end (a trial
    that meets its target mostly changes nothing else); then, where it changed
    another device, those users and every device after it (a late forward reaches
    them first), for a round trip from the first change; then the whole pipeline
    from where the run is still exact. The limit check (with finish_tails) stops a
    trial that cannot meet the limit wherever the run is exact.

A trial that cannot end by its limit comes back not complete, past_limit.
"""
from __future__ import annotations

import bisect
import math
from collections import OrderedDict
from typing import Sequence

from schedules.actions import COMPUTE, Priced
from schedules.generators.caps import first_over
from schedules.ir import Action
from schedules.scheduling.list_schedule import Known, Relaxed, Run, list_schedule

_SLACK = 1e-12     # as list_schedule's: a run ending within it of the limit meets it
_REMEMBERED = 4    # runs kept to start trials from (each a few MB at p = 64, m = 512)


class CappedRun:
    """A priced run whose devices in `queues` may be capped; `timed(caps, limit)`."""

    def __init__(self, run: Priced, queues: dict[int, tuple[tuple[int, ...], ...]], alternate: bool) -> None:
        self.run, self.queues, self.alternate = run, queues, alternate
        self.tail = finish_tails(run)
        # trials start from a remembered run only where that is exact (module docstring)
        self.incremental = not run.pair and all(d > 0 for d in run.dur)
        # about a round trip through the pipeline: the first window a growing group runs
        self.window = 2 * (sum(max((run.dur[i] for i in row), default=0.0) for row in run.rows) + sum(run.lag))
        self._runs: OrderedDict[tuple, Run] = OrderedDict()
        # per action: (user, boundary, user's device) of each action on another device waiting on it
        users: list[list[tuple[int, int, int]]] = [[] for _ in run.actions]
        for i, on in enumerate(run.deps):
            for j, b in on:
                if run.device_of[j] != run.device_of[i]:
                    users[j].append((i, b, run.device_of[i]))
        self.users = users
        self._rows: dict[int, tuple[list[int], tuple[Action, ...]]] = {}   # id(order) -> (order, its actions)

    def choosers(self, caps: dict[int, int]) -> dict[int, Relaxed]:
        return {d: Relaxed(self.queues[d], cap, self.alternate) for d, cap in caps.items()}

    def rows(self, done: Run) -> list[list[Action]]:
        """Each device's actions in the order placed. A trial shares the order lists of
        the devices it did not re-run with the run it started from: each such row is
        looked up once (the lists are never changed once their run is done)."""
        get = self.run.actions.__getitem__
        out = []
        for ids in done.order:
            kept = self._rows.get(id(ids))
            if kept is None or kept[0] is not ids:
                if len(self._rows) > 8 * len(done.order):
                    self._rows.clear()
                kept = self._rows[id(ids)] = (ids, tuple(map(get, ids)))
            out.append(list(kept[1]))
        return out

    def timed(self, caps: dict[int, int], limit: float = math.inf) -> Run:
        """The list scheduler's run under `caps`, stopped (past_limit) once sure to
        end past `limit`; from a remembered run one cap above where there is one."""
        near = self._near(caps) if self.incremental else None
        if near is None:
            done = list_schedule(self.run, self.choosers(caps), limit, tail=self.tail)
        else:
            done = self._from(near[0], near[1], caps, limit)
        if done.complete and not done.past_limit:
            key = tuple(sorted(caps.items()))
            self._runs[key] = done
            self._runs.move_to_end(key)
            if len(self._runs) > _REMEMBERED:
                self._runs.popitem(last=False)
        return done

    def _near(self, caps: dict[int, int]) -> tuple[Run, int] | None:
        """(a remembered run, the device) where the caps differ in one device only,
        whose cap there was larger; the latest such run."""
        for key in reversed(self._runs):
            old = dict(key)
            if old.keys() != caps.keys():
                continue
            diff = [d for d in caps if old[d] != caps[d]]
            if len(diff) == 1 and old[diff[0]] > caps[diff[0]]:
                return self._runs[key], diff[0]
            if not diff:
                return self._runs[key], -1
        return None

    def _from(self, ref: Run, r: int, caps: dict[int, int], limit: float) -> Run:
        """The run under `caps` from `ref`, whose caps were the same but larger on r."""
        acts = self.run.actions
        over = None if r < 0 else first_over([acts[i] for i in ref.order[r]], caps[r])
        if over is None:
            return _limited(ref, limit)
        choosers = self.choosers(caps)
        at, cur, moved = ref.start[ref.order[r][over]], ref, set()
        # (group, window): the capped device for a round trip, then to the end; with the
        # users it changed and the devices after it for a round trip; then all of them
        steps = (({r}, self.window), ({r}, math.inf), (set(range(r, len(ref.order))), self.window))
        step, whole_at = 0, at
        while step < len(steps):
            group = steps[step][0] | moved     # the users of what changed before `at`, where the run is exact
            known = _merged(cur, group, at)
            done = list_schedule(self.run, {d: c for d, c in choosers.items() if d in group}, limit, known=known,
                                 tail=self.tail, until=at + steps[step][1])
            if not (done.complete or done.paused or done.past_limit):
                break      # stuck: the group waits on what others would do differently
            changed, first, open_, last = self._horizon(done, ref, group, known)
            if done.complete and not changed:
                return _limited(done, limit)
            if done.past_limit and min(first, open_) > max(last, done.stopped):   # exact so far: the check stands
                return done
            cur, whole_at = done, min(first, open_, done.stopped)
            if done.paused and first >= done.stopped:     # no user changed so far: on from there
                at, step = done.stopped, (1 if step == 0 else len(steps))
                continue
            moved |= changed
            at, step = min(first, done.stopped), (2 if step < 2 else len(steps))
        return list_schedule(self.run, choosers, limit, known=_resumed(cur, min(at, whole_at)), tail=self.tail)

    def _horizon(self, done: Run, ref: Run, group: set[int], known: Known
                 ) -> tuple[set[int], float, float, float]:
        """(the devices outside `group` whose choices an output the group placed after
        `known` changes, the earliest time such an output ends now or in `ref`, the
        earliest time an output not placed yet ended in `ref` whose user may or may not
        change, the latest start placed): the run is exact before the first, and before
        the second unless a later run finds that output changes its user. An output
        that ends later than in `ref` but before its user started there changes
        nothing (the user found it ready when it chose it; at an earlier choice it was
        not the one chosen); one not placed when the run stopped ends after that."""
        moved: set[int] = set()
        first = open_ = math.inf
        last = -math.inf
        users, new, old, start, lag = self.users, done.end, ref.end, ref.start, self.run.lag
        for d in group:
            placed = done.order[d][known.count[d]:]
            if placed:
                last = max(last, done.start[placed[-1]])
            for j in placed:
                e = new[j]
                if e != old[j]:
                    late = e > old[j]
                    for i, b, u in users[j]:
                        if u not in group and not (late and e + lag[b] <= start[i]):
                            moved.add(u)
                            first = min(first, e, old[j])
            if done.complete:
                continue
            for j in ref.order[d][_before(ref, d, known.at):]:
                if old[j] >= done.stopped:
                    break
                if new[j] is None:
                    for i, b, u in users[j]:
                        if u in group:
                            continue
                        if done.stopped + lag[b] >= start[i]:    # it ends after its user started there
                            moved.add(u)
                            first = min(first, old[j])
                        else:
                            open_ = min(open_, old[j])
        return moved, first, open_, last


def finish_tails(run: Priced) -> list[float]:
    """Per device, a time the run must go on after any of its actions ends: the
    least, over its compute actions, of the longest chain of dependents after one
    (transfer, then duration, and so on). Adding it to a device's remaining work
    keeps list_schedule's limit check a lower bound of the makespan."""
    dur, deps, lag = run.dur, run.deps, run.lag
    users = [0] * len(dur)
    for on in deps:
        for j, _ in on:
            users[j] += 1
    after = [0.0] * len(dur)
    todo = [i for i, u in enumerate(users) if u == 0]
    while todo:   # reverse topological order: an action once every user of it is done
        i = todo.pop()
        for j, b in deps[i]:
            chain = lag[b] + dur[i] + after[i]
            if chain > after[j]:
                after[j] = chain
            users[j] -= 1
            if users[j] == 0:
                todo.append(j)
    return [min((after[i] for i in row if run.lane[i] == COMPUTE), default=0.0) for row in run.rows]


def _before(done: Run, d: int, at: float) -> int:
    """How many of device d's actions start before `at` (its order runs in time)."""
    return bisect.bisect_left(done.order[d], at, key=done.start.__getitem__)


def _resumed(base: Run, at: float) -> Known:
    """Every device from `at` on, `base` (exact before it) known before."""
    return Known(base.start, base.end, base.order, [_before(base, d, at) for d in range(len(base.order))], at)


def _merged(base: Run, group: set[int], at: float) -> Known:
    """The group's devices from `at` on (`base` exact before it), every other device's
    whole order as in `base`: the earlier run's, since a group only grows."""
    return Known(base.start, base.end, base.order,
                 [_before(base, d, at) if d in group else len(o) for d, o in enumerate(base.order)], at)


def _limited(done: Run, limit: float) -> Run:
    """`done` as a run told `limit` returns it: past_limit when it ends past it."""
    if math.isfinite(limit) and done.makespan > limit * (1 + _SLACK):
        return Run(done.start, done.end, done.order, False, True, done.halves)
    return done
