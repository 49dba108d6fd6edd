"""What travels between stages, derived from the one dependency rule (schedules.deps).

An action that another stage's action depends on sends that stage a message: its
output. With today's kinds

    F(s, x) --activation--> F(s+1, x)       B/I(s, x) --input grad--> B/I(s-1, x)

A message is named by (producer, consumer) action. Its shape is that of the stage
boundary it crosses (stage s's output = stage s+1's input; a gradient has the shape
of its primal), so every process knows every message's shape and dtype without
compiling other processes' stages.

Cross-process messages are moved by JAX's cross-process `jax.device_put`, which
every process must issue, in one global order (found on an H200;
obscura_jax.processes.cross_process explains the rule):
`transfer_plan` lists them, each right after its producer in the global issue
order, and `order_digest` hashes everything the processes must agree on.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from schedules.deps import dependency_map
from schedules.ir import Action, Schedule


@dataclass(frozen=True, order=True)
class Message:
    producer: Action
    consumer: Action

    @property
    def src(self) -> int:
        return self.producer.stage

    @property
    def dst(self) -> int:
        return self.consumer.stage

    @property
    def boundary(self) -> int:
        """The stage boundary it crosses: b means between stages b and b+1."""
        return min(self.src, self.dst)

    def __str__(self) -> str:
        return f"{self.producer.long}->{self.consumer.long}"


@dataclass(frozen=True)
class Routes:
    """Per action: the messages it waits for and the ones it sends."""
    incoming: dict[Action, tuple[Message, ...]]
    outgoing: dict[Action, tuple[Message, ...]]


def message_routes(schedule: Schedule) -> Routes:
    """The cross-stage data dependencies of `schedule` (schedules.deps), as messages."""
    incoming: dict[Action, list[Message]] = {}
    outgoing: dict[Action, list[Message]] = {}
    for action, deps in dependency_map(schedule).items():
        incoming.setdefault(action, [])
        outgoing.setdefault(action, [])
        for dep in deps:
            if dep.stage != action.stage:
                msg = Message(dep, action)
                incoming[action].append(msg)
                outgoing.setdefault(dep, []).append(msg)
    return Routes({a: tuple(sorted(m)) for a, m in incoming.items()},
                  {a: tuple(sorted(m)) for a, m in outgoing.items()})


def transfer_plan(order: list[Action], routes: Routes, process_of_stage) -> list[Message]:
    """The messages between stages of different processes, each placed right after
    its producer in the global issue `order`. Every process walks this same list."""
    return [m for a in order for m in routes.outgoing.get(a, ())
            if process_of_stage[m.src] != process_of_stage[m.dst]]


def device_rows(order: list[Action], device_of_stage, stages) -> dict:
    """Each device's row: the global issue order restricted to that device's stages
    (among `stages`), i.e. the schedule's own row when stages sit on the devices the
    schedule names (the issue order keeps every row's order). Keyed by device."""
    wanted = set(stages)
    rows: dict = {}
    for s in sorted(wanted):
        rows.setdefault(device_of_stage[s], [])
    for a in order:
        if a.stage in wanted:
            rows[device_of_stage[a.stage]].append(a)
    return rows


def order_digest(schedule: Schedule, order: list[Action], plan: list[Message], process_of_stage,
                 boundary_specs, extra: dict | None = None) -> tuple[str, str]:
    """(sha256, one-line summary) of what every process must hold identically: the
    schedule's rows, the issue order, the transfer plan, the stage -> process map,
    each boundary's shape and dtype, plus `extra` (run identity, jax version)."""
    doc = {"schedule": schedule.name, "p": schedule.num_stages, "m": schedule.num_microbatches,
           "rows": [[a.long for a in row] for row in schedule.rows],
           "order": [a.long for a in order], "transfers": [str(m) for m in plan],
           "stage_process": [int(p) for p in process_of_stage],
           "boundaries": [[list(s.shape), str(s.dtype)] for s in boundary_specs],
           "extra": extra or {}}
    digest = hashlib.sha256(json.dumps(doc, sort_keys=True, default=_sorted_set).encode()).hexdigest()
    summary = (f"{schedule.name} p={schedule.num_stages} m={schedule.num_microbatches}, "
               f"{len(plan)} transfers, stages on processes {list(doc['stage_process'])}, "
               f"order {digest[:12]}")
    return digest, summary


def _sorted_set(value):
    """JSON for the sets a run's settings hold (a RecomputePolicy's recompute and
    offload sets): a sorted list, the same on every process (a set's own order
    follows each process's string hashing)."""
    if isinstance(value, (set, frozenset)):
        return sorted(value)
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")
