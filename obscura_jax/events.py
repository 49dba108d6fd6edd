"""A measured per-action timeline without serialising the pipeline.

Each stage worker hands its issued actions' outputs to `EventRecorder.issued`; one
waiter thread per (device, lane) calls `jax.block_until_ready` on them in issue
order and notes the time they became ready. The dispatching workers never wait, so
devices keep running concurrently; waiting threads release the GIL. Several
workers record at once (one per device); each process records its own stages, and
`merge_events` puts several processes' events on one clock. Lanes are the per-kind
table's (schedules.actions): compute (F, B, I, W) per device, and one lane per
direction of host copies (SO, SI), which run on their own copy streams and may
finish out of order with compute.

An action's start is inferred as what an in-order device implies, by the list
scheduler (schedules.list_schedule) the simulator runs:
    start = max(its dispatch time, end of the previous action in its lane,
                end of every action it depends on (schedules.deps)).
Cross-device transfer time is folded into the consumer. Error sources, stated honestly: a ready time is observed when the
waiter thread next runs (the GIL switch interval is lowered to 0.1 ms while
recording), and on emulated CPU devices "concurrent" stages share the host's cores.
"""
from __future__ import annotations

import queue
import sys
import threading
import time
from dataclasses import dataclass

import jax

from schedules.actions import LANE_OF, Priced, structure
from schedules.ir import Action
from schedules.list_schedule import list_schedule


@dataclass(frozen=True)
class ActionEvent:
    action: Action
    device: int          # device id of the stage
    dispatched: float    # perf_counter seconds
    ready: float


@dataclass(frozen=True)
class MeasuredOp:
    action: Action
    start: float         # seconds from the iteration's first dispatch
    end: float


class EventRecorder:
    def __init__(self, stage_devices: list):
        self._device_of = [d.id for d in stage_devices]
        self._queues: dict[tuple[int, str], queue.Queue] = {}
        self._threads: list[threading.Thread] = []
        self._events: list[ActionEvent] = []
        self._lock = threading.Lock()
        self._switch = None

    def __enter__(self) -> "EventRecorder":
        self._switch = sys.getswitchinterval()
        sys.setswitchinterval(1e-4)
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _waiter(self, q: queue.Queue) -> None:
        while True:
            item = q.get()
            if item is None:
                return
            action, device, arrays, dispatched = item
            try:
                jax.block_until_ready(arrays)
            except Exception:  # a failed computation surfaces in the main thread
                pass
            ready = time.perf_counter()
            with self._lock:
                self._events.append(ActionEvent(action, device, dispatched, ready))

    def issued(self, action: Action, arrays: tuple, dispatched: float) -> None:
        device = self._device_of[action.stage]
        key = (device, LANE_OF[action.kind])
        with self._lock:    # workers of several devices record at once
            q = self._queues.get(key)
            if q is None:
                q = self._queues[key] = queue.Queue()
                t = threading.Thread(target=self._waiter, args=(q,), daemon=True)
                t.start()
                self._threads.append(t)
        q.put((action, device, arrays, dispatched))

    def close(self) -> list[ActionEvent]:
        for q in self._queues.values():
            q.put(None)
        for t in self._threads:
            t.join()
        self._queues.clear()
        self._threads.clear()
        if self._switch is not None:
            sys.setswitchinterval(self._switch)
            self._switch = None
        return list(self._events)


def infer_ops(events: list[ActionEvent], num_stages: int, order: list[Action]) -> list[MeasuredOp]:
    """Events in any order -> ops with inferred starts, relative to the first dispatch:
    the list scheduler (schedules.list_schedule) over each device's part of the issue
    order, every action released at its dispatch and ending when it was seen ready,
    in its lane of the per-kind table (schedules.actions)."""
    by_action = {e.action: e for e in events}
    missing = [a for a in order if a not in by_action]
    if missing:
        raise RuntimeError(f"recorder lost {len(missing)} events (first: stage {missing[0].stage} {missing[0]})")
    origin = min(e.dispatched for e in events)
    devices = sorted({by_action[a].device for a in order})
    column = {dev: d for d, dev in enumerate(devices)}
    rows: list[list[Action]] = [[] for _ in devices]
    for a in order:    # issue order is a topological order and each lane's order
        rows[column[by_action[a].device]].append(a)
    where = [0] * num_stages
    for a in order:
        where[a.stage] = column[by_action[a].device]
    st = structure(rows, num_stages, where)
    run = Priced(st.actions, st.kind, st.rows, st.device_of, st.lane, st.deps, st.woken, st.pair,
                 [0.0] * len(st.actions), [0.0] * len(st.actions), [0.0] * (num_stages + 1))
    seen = [by_action[a] for a in st.actions]
    done = list_schedule(run, row_rules=False, release=[e.dispatched for e in seen],
                         observed_end=[e.ready for e in seen])
    times = {a: (done.start[i] - origin, done.end[i] - origin) for i, a in enumerate(st.actions)}
    return [MeasuredOp(a, *times[a]) for a in order]


def events_to_json(events: list[ActionEvent], clock_offset: float = 0.0) -> list[list]:
    """Events as JSON rows, on the reference clock (this process's perf_counter
    plus `clock_offset`, the offset to process 0's, measured at start-up)."""
    return [[e.action.long, e.device, e.dispatched + clock_offset, e.ready + clock_offset] for e in events]


def merge_events(parts: list[list[list]]) -> list[ActionEvent]:
    """Every process's `events_to_json` rows as one list of events (one clock)."""
    return [ActionEvent(Action.parse(a), int(d), float(t0), float(t1)) for rows in parts for a, d, t0, t1 in rows]
