"""A relaxed device's chooser for the list scheduler (schedules/scheduling/list_schedule.py):
what the device is told (`Relaxed`), the state the loop keeps for it as it places
actions (`ChooserState`: its queues' heads, the blocks it holds), and the gap-fitting
pick (`choose_fitting`). Kept apart from the loop so the loop reads as the lanes'
rules; the loop calls these inline, so they hold no timing of their own: a chooser
only says which head may start, the loop says when.
"""
from __future__ import annotations

import bisect
import math
from collections import Counter
from dataclasses import dataclass
from typing import Sequence

from schedules.ir import Kind

_F, _B, _W = Kind.F, Kind.B, Kind.W


@dataclass(frozen=True)
class Relaxed:
    """A relaxed device's chooser. `queues`: action indices, each queue in the order
    its actions must run (e.g. a stage's forwards by micro-batch); `cap`: blocks the
    device may hold (a forward adds one; a W, or a B without one, frees it);
    `alternate`: prefer the queue after the one it placed from last (a forward
    after a backward and the other way round: the paper's 1:1 interleaving), else
    prefer the head listed first in the row. `sizes` (action index -> (rise, net)),
    when given, counts the cap in those units instead of blocks: an action starts
    only while held + rise <= cap, and placing it adds net (e.g. bytes, as the
    memory fold counts them: schedules.memory.block_levels). `fits`: kinds that
    start only in a gap they fit (choose_fitting: a warm-up F that would delay
    the first backward-input step, a W that would delay anything, wait; a W
    still starts when a head waits for room): the zero-bubble paper's switches
    (section 3.1), a forward that delays the first B, and W only in gaps it fills."""
    queues: tuple[tuple[int, ...], ...]
    cap: float = math.inf
    alternate: bool = False
    sizes: dict[int, tuple[float, float]] | None = None
    fits: frozenset = frozenset()




def choose_fitting(ch, t, kind, deps, end, lag, dur):
    """(action, slot, ready time, soonest) for a relaxed device whose `fits` kinds
    start only in a gap they fit: the first ready head in preference order, where
    an F before the device's first backward must end before the soonest I or B
    whose inputs are placed can start (the warm-up's last forwards), and
    a W before any other head can (an input not placed yet arrives no sooner than
    t + its producer's duration + transfer: a relaxed device decides in time
    order), unless some head waits for room (the W frees it).
    (None, None, None, soonest) if none may start at t."""
    cap_full = ch.held >= ch.cap
    sizes, fits = ch.sizes, ch.fits
    heads = []
    room = False
    soonest = before_b = before_any = math.inf
    for k, (i, _) in enumerate(ch.candidates()):
        if (cap_full and kind[i] is _F) if sizes is None else ch.held + sizes[i][0] > ch.cap:
            room = True         # a W frees room for it, however late its inputs
            continue
        r, lower = 0.0, t
        for j, b in deps[i]:
            e = end[j]
            if e is None:
                r = None
                e = t + dur[j]
            e += lag[b]
            if r is not None and e > r:
                r = e
            if e > lower:
                lower = e
        heads.append((k, i, r))
        if r is not None and t < r < soonest:
            soonest = r
        if kind[i] is not _W:
            before_any = min(before_any, lower)
            if kind[i] is not _F and r is not None:
                before_b = min(before_b, r)
    for k, i, r in heads:
        if r is None or r > t:
            continue
        ki = kind[i]
        if ki in fits and not (ki is _W and room) and not (ki is _F and ch.backwards) \
                and t + dur[i] > (before_b if ki is _F else before_any):
            continue
        return i, k, r, soonest
    return None, None, None, soonest


class ChooserState:
    """A relaxed device's queues as the loop walks them: the heads (row order: kept
    sorted by row position), the blocks held, the queue placed from last."""

    def __init__(self, chooser: Relaxed) -> None:
        self.queues = [q for q in chooser.queues if q]
        self.cap = chooser.cap
        self.sizes = chooser.sizes
        self.fits = chooser.fits
        self.alternate = chooser.alternate
        self.pos = [0] * len(self.queues)
        self.heads = sorted((q[0], j) for j, q in enumerate(self.queues))
        self.held = 0
        self.backwards = 0       # B and I placed
        self.last = 0            # alternate: the queue placed from last (the first, before any)
        self._turn = self.heads
        k = len(self.queues)       # alternate: the queues in turn after each one
        self._after = [[(last + 1 + j) % k for j in range(k)] for last in range(k)]

    def candidates(self) -> list[tuple[int, int]]:
        """(action index, queue) of every head, most preferred first."""
        if not self.alternate:
            return self.heads
        q, pos = self.queues, self.pos
        self._turn = [(q[j][pos[j]], j) for j in self._after[self.last] if pos[j] < len(q[j])]
        return self._turn

    def resume(self, prefix: Sequence[int], kind: Sequence[Kind]) -> None:
        """The state after placing `prefix` (a known start: each queue's first
        actions, in the queues' orders)."""
        if not prefix:
            return
        seen = set(prefix)
        for j, q in enumerate(self.queues):     # a queue's first pos[j] actions are placed
            self.pos[j] = bisect.bisect_left(range(len(q)), True, key=lambda k: q[k] not in seen)
            if self.pos[j] and q[self.pos[j] - 1] == prefix[-1]:
                self.last = j
        kinds = Counter(map(kind.__getitem__, prefix))
        self.backwards = len(prefix) - kinds[_F] - kinds[_W]
        if self.sizes is not None:
            self.held = sum(self.sizes[i][1] for i in prefix)
        else:
            self.held = kinds[_F] - kinds[_W] - kinds[_B]   # a B here is a full one (its block has no W)
        self.heads = sorted((q[self.pos[j]], j) for j, q in enumerate(self.queues) if self.pos[j] < len(q))

    def rest(self) -> list[tuple[int, ...]]:
        """Each queue's actions not placed yet."""
        return [q[self.pos[j]:] for j, q in enumerate(self.queues)]

    def take(self, slot: int, index: int, kind: Kind) -> None:
        """Place the head at `slot` of the last candidates() (action `index`)."""
        if self.alternate:
            _, j = self._turn[slot]
        else:
            _, j = self.heads.pop(slot)
        self.pos[j] += 1
        if not self.alternate and self.pos[j] < len(self.queues[j]):
            bisect.insort(self.heads, (self.queues[j][self.pos[j]], j))
        self.last = j
        if kind is not _F and kind is not _W:
            self.backwards += 1
        if self.sizes is not None:
            self.held += self.sizes[index][1]
        elif kind is _F:
            self.held += 1
        elif kind is _W or kind is _B:     # a B here is a full one (its block has no W)
            self.held -= 1
