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
scheduler (schedules.scheduling.list_schedule) the simulator runs:
    start = max(its dispatch time, end of the previous action in its lane,
                end of every action it depends on (schedules.deps)).
Cross-device transfer time is folded into the consumer. Error sources, stated honestly: a ready time is observed when the
waiter thread next runs (the GIL switch interval is lowered to 0.1 ms while
recording), so on a busy machine it may come after the step's main thread saw every
gradient ready: `latest_end` caps it there; and on emulated CPU devices "concurrent"
stages share the host's cores.

Transfers between stages are noted where the transport delivers them
(`transferred`): a waiter per consumer device times each copy until it is ready, so
a measured trace shows them on their own track (`infer_transfers`).
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
from schedules.scheduling.list_schedule import lane_run, list_schedule

TRANSFER_LANE = "transfer"


@dataclass(frozen=True)
class ActionEvent:
    action: Action
    device: int          # device id of the stage
    dispatched: float    # perf_counter seconds
    ready: float


@dataclass(frozen=True)
class TransferEvent:
    """A stage-to-stage message that arrived on its consumer's device: `delivered`
    when the transport handed it over (its copy issued), `ready` when the copy was done."""
    message: str         # "2F3->3F3" (obscura_jax.runtime.messages.Message)
    src: int             # producing stage
    dst: int             # consuming stage
    device: int          # device id of the consumer
    delivered: float
    ready: float


@dataclass(frozen=True)
class MeasuredTransfer:
    message: str
    src: int
    dst: int
    start: float         # seconds from the step's start: when the copy could begin
    end: float


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
        self._transfers: list[TransferEvent] = []
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
            note, arrays = item
            try:
                jax.block_until_ready(arrays)
            except Exception:  # a failed computation surfaces in the main thread
                pass
            ready = time.perf_counter()
            with self._lock:
                if isinstance(note, ActionEvent):
                    self._events.append(ActionEvent(note.action, note.device, note.dispatched, ready))
                else:
                    self._transfers.append(TransferEvent(*note, ready))

    def issued(self, action: Action, arrays: tuple, dispatched: float) -> None:
        device = self._device_of[action.stage]
        self._enqueue((device, LANE_OF[action.kind]), ActionEvent(action, device, dispatched, 0.0), arrays)

    def transferred(self, msg, value) -> None:
        """A transport delivered message `msg` (obscura_jax.runtime.messages.Message) as
        `value` on its consumer's device: timed on that device's transfer lane."""
        device = self._device_of[msg.dst]
        self._enqueue((device, TRANSFER_LANE), (str(msg), msg.src, msg.dst, device, time.perf_counter()),
                      (value,))

    def _enqueue(self, key, note, arrays) -> None:
        with self._lock:    # workers of several devices record at once
            q = self._queues.get(key)
            if q is None:
                q = self._queues[key] = queue.Queue()
                t = threading.Thread(target=self._waiter, args=(q,), daemon=True)
                t.start()
                self._threads.append(t)
        q.put((note, arrays))

    def transfers(self) -> list[TransferEvent]:
        """The transfers noted so far (complete after close())."""
        with self._lock:
            return list(self._transfers)

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


def infer_ops(events: list[ActionEvent], num_stages: int, order: list[Action],
              origin: float | None = None, latest_end: float | None = None) -> list[MeasuredOp]:
    """Events in any order -> ops with inferred starts, relative to `origin` (the
    step's start; default: the first dispatch): the list scheduler
    (schedules.scheduling.list_schedule) over each device's part of the issue order, every action
    released at its dispatch and ending when it was seen ready, in its lane of the
    per-kind table (schedules.actions). `latest_end` (same clock as the events): no
    action ended later. The step's main thread saw every gradient ready then, while a
    waiter thread on a busy machine may see an output ready after it."""
    by_action = {e.action: e for e in events}
    missing = [a for a in order if a not in by_action]
    if missing:
        raise RuntimeError(f"recorder lost {len(missing)} events (first: stage {missing[0].stage} {missing[0]})")
    first = min(e.dispatched for e in events)
    origin = first if origin is None else min(origin, first)
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
                         observed_end=[_no_later(e.ready, latest_end) for e in seen])
    times = {a: (done.start[i] - origin, done.end[i] - origin) for i, a in enumerate(st.actions)}
    return [MeasuredOp(a, *times[a]) for a in order]


def _no_later(t: float, bound: float | None) -> float:
    return t if bound is None or t <= bound else bound


def infer_transfers(transfers: list[TransferEvent], ops: list[MeasuredOp], origin: float,
                    latest_end: float | None = None) -> list[MeasuredTransfer]:
    """Transfers relative to `origin`, as an in-order copy lane per consumer stage
    implies (as infer_ops does for compute): the list scheduler (schedules.scheduling.list_schedule)
    over one lane per consumer, copies in delivery order, each released at its
    delivery or its producer's end, whichever is later (a copy cannot begin before
    its data exists; the producer's time is measured, so it is a release, not an
    input to place), starting no earlier than the lane's previous copy's end, and
    ending when it was seen ready, no later than `latest_end` (as in infer_ops)."""
    end = {op.action.long: op.end for op in ops}
    ordered = sorted(transfers, key=lambda t: t.delivered)
    lanes: dict[int, list[int]] = {}
    for k, t in enumerate(ordered):
        lanes.setdefault(t.dst, []).append(k)
    rows = list(lanes.values())
    index = [k for row in rows for k in row]     # the run's job -> its copy
    release = [max(ordered[k].delivered - origin, end.get(ordered[k].message.split("->")[0], 0.0)) for k in index]
    seen = [_no_later(ordered[k].ready, latest_end) - origin for k in index]
    done = list_schedule(lane_run(rows, TRANSFER_LANE), release=release, observed_end=seen)
    times = {k: (done.start[i], done.end[i]) for i, k in enumerate(index)}
    return [MeasuredTransfer(t.message, t.src, t.dst, *times[k]) for k, t in enumerate(ordered)]


def transfers_to_json(transfers: list[TransferEvent], clock_offset: float = 0.0) -> list[list]:
    return [[t.message, t.src, t.dst, t.device, t.delivered + clock_offset, t.ready + clock_offset]
            for t in transfers]


def merge_transfers(parts: list[list[list]]) -> list[TransferEvent]:
    return [TransferEvent(str(m), int(s), int(d), int(dev), float(t0), float(t1))
            for rows in parts for m, s, d, dev, t0, t1 in rows]


def events_to_json(events: list[ActionEvent], clock_offset: float = 0.0) -> list[list]:
    """Events as JSON rows, on the reference clock (this process's perf_counter
    plus `clock_offset`, the offset to process 0's, measured at start-up)."""
    return [[e.action.long, e.device, e.dispatched + clock_offset, e.ready + clock_offset] for e in events]


def merge_events(parts: list[list[list]]) -> list[ActionEvent]:
    """Every process's `events_to_json` rows as one list of events (one clock)."""
    return [ActionEvent(Action.parse(a), int(d), float(t0), float(t1)) for rows in parts for a, d, t0, t1 in rows]
