"""Actions: `[stage][kind][micro-batch]`, the schedule IR's cells (schedules/ir.py
holds the rows they make up; schedules/actions.py what each kind does).

Action strings are those of torch.distributed.pipelining's `_Action` (its `__repr__`
/ `from_str` in torch/distributed/pipelining/schedules.py): `[stage][type][microbatch]`,
e.g. `2F0` (stage 2 forward of micro-batch 0), `2B0` (full backward), `2I0` (input-
grad half of a split backward), `2W0` (weight-grad half); plus ours, `2SO0` / `2SI0`
(swap a share of the micro-batch's residuals to host and back).

One stage per device (every schedule of the paper: stage s runs on device s) is the
special case: a row then holds one stage's actions, so the stage in each string is
redundant and actions print in the short form `F3`, `SO3` (`str(action)`; the text
goldens and schedule files `/1` use it). `action.long` is always the torch form, and
`Schedule.label` picks the form a schedule's rows print in: short when every device
runs one stage, long otherwise. `Action.parse` reads both.

A `B` of a micro-batch that also has a `W` on the same stage is the input-grad half
(the older spelling of `I`; torch's own goldens used it before `I` existed, e.g.
test/distributed/pipelining/artifacts/zb1p_2rank_2stagep_compute.csv at commit
15380b18); new generators write `I`.
"""
from __future__ import annotations

import enum
import re
from typing import NamedTuple

from schedules.errors import ScheduleError


class Kind(str, enum.Enum):
    F = "F"    # forward of one micro-batch
    B = "B"    # full backward (input + weight grad), or the input half when a W follows
    I = "I"    # noqa: E741  input-gradient half of a split backward (zero-bubble style)
    W = "W"    # weight-gradient half of a split backward
    SO = "SO"  # swap out: a fraction of the micro-batch's residuals to host
    SI = "SI"  # swap in: bring them back before the backward

    def __str__(self) -> str:
        return self.value

    # the string's own hash (C, cached), equal to Enum's hash(name) as name == value:
    # actions are dictionary keys in every hot loop
    __hash__ = str.__hash__


_SHORT_RE = re.compile(r"^(SO|SI|F|B|I|W)([0-9]+)$")   # ASCII digits (\d takes any script's)
_LONG_RE = re.compile(r"^([0-9]+)(SO|SI|F|B|I|W)([0-9]+)$")


class _ActionFields(NamedTuple):
    stage: int
    kind: Kind
    microbatch: int


class Action(_ActionFields):
    """One action, `[stage][kind][micro-batch]`, and also its key: the one hashable
    type the dependency rule (schedules.deps), the list scheduler and the memory
    fold index by. A tuple (stage, kind, micro-batch), so it orders, hashes and
    compares as one: `Action(2, Kind.F, 0) == (2, "F", 0)` (a Kind is its string)."""
    __slots__ = ()

    def __new__(cls, stage: int, kind, microbatch: int) -> "Action":
        if not isinstance(kind, Kind):
            kind = Kind(kind)
        if stage < 0 or microbatch < 0:
            raise ScheduleError(f"negative stage or micro-batch in action Action(stage={stage}, kind={kind.value}, "
                                f"microbatch={microbatch})")
        return tuple.__new__(cls, (stage, kind, microbatch))

    def __repr__(self) -> str:
        return f"Action({self.stage}, {self.kind.value}, {self.microbatch})"

    def __str__(self) -> str:
        # _value_, not the .value property: the simulator labels millions of actions in a search
        return f"{self.kind._value_}{self.microbatch}"

    @property
    def long(self) -> str:
        """torch's `_Action` form, stage first: '2F0', '2SO0'."""
        return f"{self.stage}{self.kind.value}{self.microbatch}"

    @classmethod
    def parse(cls, text: str, stage: int | None = None) -> "Action":
        """'F3' (short: needs `stage`) or '2F3' (long; a given `stage` must match)."""
        t = text.strip() if isinstance(text, str) else text
        m = _LONG_RE.match(t) if isinstance(t, str) else None
        if m:
            s = int(m.group(1))
            if stage is not None and s != stage:
                raise ScheduleError(f"action {text!r} names stage {s} but is listed under stage {stage}")
            return cls(s, Kind(m.group(2)), int(m.group(3)))
        m = _SHORT_RE.match(t) if isinstance(t, str) else None
        if m and stage is not None:
            return cls(stage, Kind(m.group(1)), int(m.group(2)))
        where = f" on stage {stage}" if stage is not None else ""
        raise ScheduleError(f"cannot parse action {text!r}{where} (expected e.g. F3, I3, W3, SO3 "
                            f"or, stage first, 2F3)")


def action(stage: int, kind: Kind, microbatch: int) -> Action:
    """An Action from parts already checked (a Kind, indices >= 0): the hot loops'
    constructor, without Action's checks."""
    return tuple.__new__(Action, (stage, kind, microbatch))
