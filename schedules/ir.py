"""The schedule IR: one per-stage ordered list of actions, read by the simulator and
the engine alike. Timing is never stored here.

    stage 0: F0 F1 F2 F3 B0 F4 B1 ...      Action(stage, kind, microbatch)
    stage 1: F0 F1 F2 B0 F3 B1 ...         prints as "F3", "SO3", parses back
"""
from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field

from schedules.errors import ScheduleError


class Kind(str, enum.Enum):
    F = "F"    # forward of one micro-batch
    B = "B"    # backward (input + weight grad, or input only when W follows)
    W = "W"    # weight-gradient half of a split backward (zero-bubble style)
    SO = "SO"  # swap out: a fraction of the micro-batch's residuals to host
    SI = "SI"  # swap in: bring them back before the backward

    def __str__(self) -> str:
        return self.value


_ACTION_RE = re.compile(r"^(SO|SI|F|B|W)(\d+)$")


@dataclass(frozen=True, order=True)
class Action:
    stage: int
    kind: Kind
    microbatch: int

    def __post_init__(self) -> None:
        if not isinstance(self.kind, Kind):
            object.__setattr__(self, "kind", Kind(self.kind))
        if self.stage < 0 or self.microbatch < 0:
            raise ScheduleError(f"negative stage or micro-batch in action {self!r}")

    def __str__(self) -> str:
        return f"{self.kind.value}{self.microbatch}"

    @classmethod
    def parse(cls, text: str, stage: int) -> "Action":
        m = _ACTION_RE.match(text.strip())
        if not m:
            raise ScheduleError(f"cannot parse action {text!r} on stage {stage} (expected e.g. F3, B3, W3, SO3, SI3)")
        return cls(stage, Kind(m.group(1)), int(m.group(2)))


@dataclass(frozen=True)
class StageSpec:
    """One stage's ordered actions and its memory-saving settings.

    `recompute` holds op names or policy preset names (e.g. ("full",) or
    ("mlp_act", "mlp_mul")); a stage that recomputes anything is *adjusted*.
    `swap_fraction` is beta, the fraction of each swapped block moved to host;
    `swap_blocks` is lambda, the blocks evicted during warm-up.
    """
    actions: tuple[Action, ...]
    recompute: tuple[str, ...] = ()
    swap_fraction: float = 0.0
    swap_blocks: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "actions", tuple(self.actions))
        object.__setattr__(self, "recompute", tuple(self.recompute))
        if not 0.0 <= self.swap_fraction <= 1.0:
            raise ScheduleError(f"swap fraction must be in [0, 1], got {self.swap_fraction}")
        if self.swap_blocks < 0:
            raise ScheduleError(f"swap blocks must be >= 0, got {self.swap_blocks}")

    @property
    def adjusted(self) -> bool:
        return bool(self.recompute)


@dataclass(frozen=True)
class Schedule:
    name: str
    num_stages: int
    num_microbatches: int
    stages: tuple[StageSpec, ...] = field(default=())

    def __post_init__(self) -> None:
        object.__setattr__(self, "stages", tuple(self.stages))
        if self.num_stages < 1:
            raise ScheduleError(f"number of stages must be >= 1, got {self.num_stages}")
        if self.num_microbatches < 1:
            raise ScheduleError(f"number of micro-batches must be >= 1, got {self.num_microbatches}")
        if len(self.stages) != self.num_stages:
            raise ScheduleError(f"schedule {self.name!r} has {len(self.stages)} stage rows for {self.num_stages} stages")
        for s, spec in enumerate(self.stages):
            for a in spec.actions:
                if a.stage != s:
                    raise ScheduleError(f"action {a} of stage {a.stage} listed under stage {s}")

    def actions(self, stage: int) -> tuple[Action, ...]:
        return self.stages[stage].actions

    @property
    def adjusted_stages(self) -> tuple[int, ...]:
        return tuple(s for s, spec in enumerate(self.stages) if spec.adjusted)

    def grid(self) -> list[list[str]]:
        """Stage x step table of action strings (rows may differ in length)."""
        return [[str(a) for a in spec.actions] for spec in self.stages]
