"""The one order walker: every action of a schedule in one order that keeps given
chains' orders and every dependency, earliest simulated start first.

Its users differ only in the chains: the engine's issue order (schedules.ordering:
each device's row) and one device running a pipeline's stages in turn
(schedules.simulator.on_one_device: each stage's own order). Starts alone are not
such an order (a copy, SO/SI, starts on its own lane, possibly after the stage's
next compute; zero-length actions tie), so the walk is a topological sort that
takes the ready action with the earliest start, ties broken by (chain, position in
the chain): dependencies always come first, even between actions that start
together. The starts are the list scheduler's (schedules.scheduling.list_schedule); the walk
times nothing.
"""
from __future__ import annotations

import heapq
from typing import Mapping, Sequence

from schedules.ir import Action


def merge_in_start_order(chains: Sequence[Sequence[Action]], deps: Mapping[Action, Sequence[Action]],
                         start: Mapping[Action, float]) -> list[Action]:
    """Every action of `chains`, each chain's order kept, after all it waits on
    (`deps`: action -> its inputs, among the chains' actions), ready actions taken
    by (start, chain, position)."""
    key: dict[Action, tuple[float, int, int]] = {}
    waiting: dict[Action, int] = {}
    after: dict[Action, list[Action]] = {}
    for c, chain in enumerate(chains):
        for i, a in enumerate(chain):
            key[a] = (start[a], c, i)
            waiting[a] = len(deps[a]) + (i > 0)
            after[a] = []
        for prev, a in zip(chain, chain[1:]):
            after[prev].append(a)
    for a in waiting:
        for x in deps[a]:     # an input on the same chain comes earlier in it: counted twice, released twice
            after[x].append(a)
    ready = [(*key[a], a) for a, n in waiting.items() if not n]
    heapq.heapify(ready)
    out: list[Action] = []
    while ready:
        *_, a = heapq.heappop(ready)
        out.append(a)
        for b in after[a]:
            waiting[b] -= 1
            if not waiting[b]:
                heapq.heappush(ready, (*key[b], b))
    return out
