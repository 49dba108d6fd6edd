"""The schedule IR: per-device ordered rows of actions, each naming its model stage,
read by the simulator and the engine alike. Timing is never stored here.

    device 0: 0F0 0F1 4F0 4F1 ... 4B0 0B0 ...    Action(stage, kind, microbatch)
    device 1: 1F0 1F1 5F0 ...                     stage_to_device[s] says where stage s runs

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
from dataclasses import dataclass, field
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


BACKWARD_INPUT_KINDS = (Kind.B, Kind.I)     # the step that sends a gradient upstream
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
        return f"{self.kind.value}{self.microbatch}"

    @property
    def long(self) -> str:
        """torch's `_Action` form, stage first: '2F0', '2SO0'."""
        return f"{self.stage}{self.kind.value}{self.microbatch}"

    @property
    def is_compute(self) -> bool:
        """Whether it runs on its device's compute lane (schedules.actions.KINDS)."""
        from schedules.actions import COMPUTE_KINDS  # lazy: schedules.actions builds on this module
        return self.kind in COMPUTE_KINDS

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


def check_recompute_names(names) -> None:
    """Every name must be an op or a preset of some registered model family
    (models.registry; a --model-module registers more), else one line."""
    from models.registry import LAYER, all_ops, family_names, preset_names  # lazy: registry on first use

    known = set(all_ops()) | {p for fam in family_names() for p in preset_names(fam)} | {LAYER}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ScheduleError(f"unknown recompute op or preset {unknown[0]!r}; known presets: "
                            f"{', '.join(sorted({LAYER} | {p for f in family_names() for p in preset_names(f)}))}; "
                            "ops: those of the registered models (obscura model-info MODEL lists them)")


@dataclass(frozen=True)
class StageSpec:
    """One model stage's ordered actions and its memory-saving settings.

    `actions` is the stage's own order (its projection of its device's row).
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
        check_recompute_names(self.recompute)

    @property
    def adjusted(self) -> bool:
        return bool(self.recompute)


@dataclass(frozen=True)
class Schedule:
    """`stages[s]`: stage s's settings and own order; `stage_to_device[s]`: its device
    (default: stage s on device s); `device_rows[d]`: device d's order over all its
    stages. With one stage per device the rows are the stages' own orders and are
    not stored (`device_rows` stays empty; `rows` derives them). With several stages
    on a device the rows are required, and each stage's `actions` is filled from
    them (or, if given, must equal its projection of the row).

    `overlapped`: pairs (a, b) of compute actions that run as one unit, as torch's
    `(a;b)OVERLAP_F_B` cells (DualPipeV) do: b right after a in its device's row;
    the unit starts when both may start, takes a's time plus b's, and both outputs
    leave at its end (see the simulator)."""
    name: str
    num_stages: int
    num_microbatches: int
    stages: tuple[StageSpec, ...] = field(default=())
    stage_to_device: tuple[int, ...] = ()
    device_rows: tuple[tuple[Action, ...], ...] = ()
    overlapped: tuple[tuple[Action, Action], ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "stages", tuple(self.stages))
        if self.num_stages < 1:
            raise ScheduleError(f"number of stages must be >= 1, got {self.num_stages}")
        if self.num_microbatches < 1:
            raise ScheduleError(f"number of micro-batches must be >= 1, got {self.num_microbatches}")
        if len(self.stages) != self.num_stages:
            raise ScheduleError(f"schedule {self.name!r} has {len(self.stages)} stage rows for {self.num_stages} stages")
        p = self.num_stages
        where = tuple(self.stage_to_device) or tuple(range(p))
        if len(where) != p or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in where):
            raise ScheduleError(f"schedule {self.name!r}: stage_to_device must hold {p} device indices >= 0, "
                                f"got {self.stage_to_device!r}")
        if max(where) >= p:            # before range(devices): [0, 10**9] would take gigabytes
            raise ScheduleError(f"schedule {self.name!r}: stage_to_device names device {max(where)}, but "
                                f"{p} stages run on at most {p} devices")
        devices = max(where) + 1
        idle = sorted(set(range(devices)) - set(where))
        if idle:
            raise ScheduleError(f"schedule {self.name!r}: device {idle[0]} runs no stage")
        object.__setattr__(self, "stage_to_device", where)
        rows = tuple(tuple(r) for r in self.device_rows)
        one_each = len(set(where)) == p
        if rows:
            if len(rows) != devices:
                raise ScheduleError(f"schedule {self.name!r} has {len(rows)} device rows for {devices} devices")
            for d, row in enumerate(rows):
                for a in row:
                    if not 0 <= a.stage < p:
                        raise ScheduleError(f"action {a.long} on device {d} names stage {a.stage} of a "
                                            f"{p}-stage schedule")
                    if where[a.stage] != d:
                        raise ScheduleError(f"action {a.long} of stage {a.stage} (device {where[a.stage]}) "
                                            f"listed on device {d}")
            own = [tuple(a for a in rows[where[s]] if a.stage == s) for s in range(p)]
            specs = []
            for s, spec in enumerate(self.stages):
                if spec.actions and spec.actions != own[s]:
                    raise ScheduleError(f"schedule {self.name!r}: stage {s}'s actions differ from its order "
                                        f"on device {where[s]}")
                specs.append(spec if spec.actions else StageSpec(own[s], spec.recompute, spec.swap_fraction,
                                                                 spec.swap_blocks))
            object.__setattr__(self, "stages", tuple(specs))
            if one_each:
                rows = ()            # derivable: keep one canonical form
        elif not one_each:
            raise ScheduleError(f"schedule {self.name!r} puts several stages on a device: give device_rows")
        object.__setattr__(self, "device_rows", rows)
        for s, spec in enumerate(self.stages):
            for a in spec.actions:
                if a.stage != s:
                    raise ScheduleError(f"action {a} of stage {a.stage} listed under stage {s}")
        self._check_overlapped()

    def _check_overlapped(self) -> None:
        pairs = tuple((a, b) for a, b in self.overlapped)
        object.__setattr__(self, "overlapped", pairs)
        seen: set[Action] = set()
        for a, b in pairs:
            row = self.rows[self.stage_to_device[a.stage]] if 0 <= a.stage < self.num_stages else ()
            i = row.index(a) if a in row else -1
            if i < 0 or i + 1 >= len(row) or row[i + 1] != b or not (a.is_compute and b.is_compute):
                raise ScheduleError(f"schedule {self.name!r}: overlapped {a.long};{b.long} must be two compute "
                                    f"actions, the second right after the first in one device's row")
            if a in seen or b in seen:
                raise ScheduleError(f"schedule {self.name!r}: {a.long};{b.long} overlaps an action twice")
            seen.update((a, b))

    def actions(self, stage: int) -> tuple[Action, ...]:
        """Stage `stage`'s own order."""
        return self.stages[stage].actions

    @property
    def num_devices(self) -> int:
        return max(self.stage_to_device) + 1

    @property
    def one_stage_per_device(self) -> bool:
        return len(set(self.stage_to_device)) == self.num_stages

    @property
    def rows(self) -> tuple[tuple[Action, ...], ...]:
        """Every device's order over all its stages."""
        if self.device_rows:
            return self.device_rows
        by_device: list[tuple[Action, ...]] = [()] * self.num_devices
        for s, d in enumerate(self.stage_to_device):
            by_device[d] = self.stages[s].actions
        return tuple(by_device)

    def stages_on(self, device: int) -> tuple[int, ...]:
        return tuple(s for s, d in enumerate(self.stage_to_device) if d == device)

    def label(self, action: Action) -> str:
        """How this schedule prints an action: 'F3' when every device runs one stage,
        torch's '2F3' otherwise."""
        return str(action) if self.one_stage_per_device else action.long

    @property
    def adjusted_stages(self) -> tuple[int, ...]:
        return tuple(s for s, spec in enumerate(self.stages) if spec.adjusted)

    def grid(self) -> list[list[str]]:
        """Device x step table of action strings (rows may differ in length); with one
        stage per device, row d is stage d's order in the short form."""
        return [[self.label(a) for a in row] for row in self.rows]

    def row_labels(self) -> list[str]:
        """'stage d' with one stage per device (the golden files' form), else 'device d'."""
        if self.one_stage_per_device:
            return [f"stage {self.stages_on(d)[0]}" for d in range(self.num_devices)]
        return [f"device {d}" for d in range(self.num_devices)]
