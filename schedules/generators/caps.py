"""Migration caps: how many blocks a relaxed stage (or device) may hold, searched.

Obscura on 1F1B (obscura.migration_caps) and on today's schedules
(obscura_on._smallest_caps) both start from caps under which the relaxed order is
fast enough, then give each capped row in turn, last first, the smallest cap that
keeps the makespan at most a target, by bisection (`bisect_caps`).

A row holds a block from its forward until the step that frees it: W, or B when
the block has no W (`held_peaks`). A cap at least as large as what the row holds at
most under the current caps never binds, so the relaxation under it is that same
run (tests/schedules/generators/test_caps.py checks this on random schedules): the
bisection takes such trials as met without running them, which leaves its steps
and answer as they were and skips most of its relaxations. A trial it does run
differs from the last run that met the target from the first forward that run
started holding `cap` blocks on (`first_over`): the relaxations start it there
(generators/relaxation.py). Both read the one memory fold of a row, remembered for
the last few rows asked: the row bisected and the run it came from.
"""
from __future__ import annotations

import functools
from typing import Callable, Sequence

from schedules.ir import Action
from schedules.memory import BLOCKS, MemoryProfile, order_memory

# relax(caps, limit) -> (rows, makespan), or None on deadlock or once the makespan is
# sure to exceed limit (a trial that cannot meet the target may stop early)
Relaxation = Callable[[dict[int, int], float], "tuple[list[list[Action]], float] | None"]


@functools.lru_cache(maxsize=8)
def _blocks(row: tuple[Action, ...]) -> MemoryProfile:
    """The fold of one row, remembered: a search asks for the last rows' again."""
    return order_memory(row, BLOCKS)


def held_peaks(rows: Sequence[Sequence[Action]]) -> tuple[int, ...]:
    """Blocks each row holds at most, counted along it by the one memory fold
    (schedules.memory.order_memory: F adds one; W, or B when the block has no W,
    frees it): what the simulator's in-flight peak is."""
    return tuple(_blocks(tuple(row)).peak_inflight_microbatches for row in rows)


def first_over(row: Sequence[Action], cap: int) -> int | None:
    """Index of the first action of `row` at whose start the row holds more than
    `cap` blocks (by the same fold: the first forward a cap of `cap` stops), or
    None."""
    for t, level in _blocks(tuple(row)).steps:
        if level > cap:
            return int(t) // 2
    return None


def bisect_caps(relax: Relaxation, caps: dict[int, int], low: dict[int, int],
                found: tuple[list[list[Action]], float], target: float
                ) -> tuple[dict[int, int], tuple[list[list[Action]], float]]:
    """(caps, relax(caps)) after bisecting each capped row, last first, down to the
    smallest cap in [low, caps[row]] whose relaxation (None: deadlock) ends by
    `target`; `found` is relax(caps), which does."""
    caps = dict(caps)
    for r in sorted(caps, reverse=True):
        lo, hi = low.get(r, 1), caps[r]
        held = held_peaks([found[0][r]])[0]     # row r's only: the one the trials below read
        while lo < hi:
            mid = (lo + hi) // 2
            if mid >= held:   # does not bind: the run `found` is, which ends by target
                hi = mid
                continue
            trial = relax({**caps, r: mid}, target)
            if trial is not None and trial[1] <= target:
                hi, found = mid, trial
                held = held_peaks([trial[0][r]])[0]
            else:
                lo = mid + 1
        caps[r] = hi
    return caps, found
