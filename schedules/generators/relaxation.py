"""A relaxation under caps, run whole or near an earlier run: what the cap search
(generators/caps.py) costs.

`CappedRun(run, queues, alternate)` holds a priced run (schedules.actions) and, per
device that may be capped, the queues its chooser walks (schedules.list_schedule:
Relaxed); `timed(caps, limit)` is the list scheduler's Run of those devices
relaxed under `caps` (the others issue their rows in order). The two relaxations
(relax.py: the paper's stage policy; device_relax.py: any schedule) are this with
queues of their own, and their results are read off its Runs.

A bisection trial differs from a run it already has (the last one that met its
target) by one device's smaller cap. `timed` starts such a trial from that run
instead of from nothing, and gives the same Run as a whole one would, when every
compute action lasts a positive time (otherwise it runs whole):

  - before the cap binds, the trial is that run: up to the start of the first
    forward the earlier run placed while the device already held `cap` blocks (the
    one memory fold over its order: schedules.memory.order_memory); if there is
    none, the cap never binds and the trial is that run;
  - after it, only the devices whose inputs change can act differently. A device's
    choices depend on nothing but the times its inputs end (with positive durations
    every input that ends by a time is placed before the loop decides at that time,
    and the device decides at each time one of its queues' heads becomes ready),
    so the loop re-runs the capped device from there with every other device's
    times known; if some output it sends to another device now ends at another
    time, that device joins and the loop re-runs the set from the first time such
    an output differs (before it, all agreed). When no output leaving the set
    changes, the other devices' times stand and the run is exact;
  - a set that keeps growing gives way to the whole pipeline, resumed from that
    time with the limit, which stops a trial that cannot meet it once one device's
    remaining work plus its tail (list_schedule.finish_tails) passes it.

A trial that cannot end by its limit comes back not complete, past_limit, as the
whole run with that limit would.
"""
from __future__ import annotations

import bisect
import math
from collections import OrderedDict
from typing import Sequence

from schedules.actions import Priced
from schedules.generators.caps import first_over
from schedules.ir import Action, Kind
from schedules.list_schedule import Known, Relaxed, Run, finish_tails, list_schedule

_SLACK = 1e-12     # as list_schedule's: a run ending within it of the limit meets it
_REMEMBERED = 4    # runs kept to start trials from (each a few MB at p = 64, m = 512)
_ROUNDS = 3        # sets re-run before the pipeline is resumed whole


class CappedRun:
    """A priced run whose devices in `queues` may be capped; `timed(caps, limit)`."""

    def __init__(self, run: Priced, queues: dict[int, tuple[tuple[int, ...], ...]], alternate: bool) -> None:
        self.run, self.queues, self.alternate = run, queues, alternate
        self.tail = finish_tails(run)
        # trials start from a remembered run only where that is exact (module docstring)
        self.incremental = not run.pair and all(d > 0 for d in run.dur)
        self._runs: OrderedDict[tuple, Run] = OrderedDict()

    def choosers(self, caps: dict[int, int]) -> dict[int, Relaxed]:
        return {d: Relaxed(self.queues[d], cap, self.alternate) for d, cap in caps.items()}

    def rows(self, done: Run) -> list[list[Action]]:
        acts = self.run.actions
        return [[acts[i] for i in ids] for ids in done.order]

    def timed(self, caps: dict[int, int], limit: float = math.inf) -> Run:
        """The list scheduler's run under `caps`, stopped (past_limit) once sure to
        end past `limit`; from a remembered run one cap above where there is one."""
        near = self._near(caps) if self.incremental else None
        if near is None:
            done = list_schedule(self.run, self.choosers(caps), limit, tail=self.tail)
        else:
            done = self._from(near[0], near[1], caps, limit)
        if done.complete and not done.past_limit:
            self._runs[tuple(sorted(caps.items()))] = done
            self._runs.move_to_end(tuple(sorted(caps.items())))
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
        at = ref.start[ref.order[r][over]]
        # the capped device and those its forwards feed: a later forward changes their inputs
        base, group = ref, {r, *(u for i in ref.order[r] if self.run.kind[i] is Kind.F for u in self.run.woken[i])}
        choosers = self.choosers(caps)
        for _ in range(_ROUNDS):
            known = Known(base.start, base.end, base.order,
                          [_before(base, d, at) if d in group else len(base.order[d]) for d in range(len(base.order))],
                          at)
            done = list_schedule(self.run, {d: c for d, c in choosers.items() if d in group}, known=known)
            if not done.complete:
                break
            moved, first = self._changed(done, ref, group)
            if not moved:
                return _limited(done, limit)
            base, at = done, first
            group |= moved
        counts = [_before(base, d, at) for d in range(len(base.order))]
        return list_schedule(self.run, choosers, limit, known=Known(base.start, base.end, base.order, counts, at),
                             tail=self.tail)

    def _changed(self, done: Run, ref: Run, group: set[int]) -> tuple[set[int], float]:
        """Devices outside `group` an action of the group sends to whose end moved from
        `ref`, and the earliest time such an end (old or new) falls."""
        moved: set[int] = set()
        first = math.inf
        users, new, old = self.run.woken, done.end, ref.end
        for d in group:
            for i in self.run.rows[d]:
                if new[i] != old[i]:
                    out = [u for u in users[i] if u not in group]
                    if out:
                        moved.update(out)
                        first = min(first, new[i], old[i])
        return moved, first


def _before(done: Run, d: int, at: float) -> int:
    """How many of device d's actions start before `at` (its order runs in time)."""
    return bisect.bisect_left(done.order[d], at, key=done.start.__getitem__)


def _limited(done: Run, limit: float) -> Run:
    """`done` as a run told `limit` returns it: past_limit when it ends past it."""
    if math.isfinite(limit) and done.makespan > limit * (1 + _SLACK):
        return Run(done.start, done.end, done.order, False, True, done.halves)
    return done
