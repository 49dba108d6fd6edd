"""The schedule IR: per-device ordered rows of actions, each naming its model stage,
read by the simulator and the engine alike. Timing is never stored here.

    device 0: 0F0 0F1 4F0 4F1 ... 4B0 0B0 ...    Action(stage, kind, microbatch)
    device 1: 1F0 1F1 5F0 ...                     stage_to_device[s] says where stage s runs

Actions and their strings: schedules/kinds.py (re-exported here).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field

from schedules.actions import COMPUTE_KINDS, effective_kind, split_blocks
from schedules.errors import ScheduleError
from schedules.kinds import Action, Kind, action  # noqa: F401  (re-exported: the IR's cells)

BACKWARD_INPUT_KINDS = (Kind.B, Kind.I)     # the step that sends a gradient upstream


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
            if i < 0 or i + 1 >= len(row) or row[i + 1] != b or not (a.kind in COMPUTE_KINDS and b.kind in COMPUTE_KINDS):
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

    @functools.cached_property
    def split_blocks(self) -> frozenset[tuple[int, int]]:
        """(stage, micro-batch) of every split backward (those with a W)."""
        return frozenset(split_blocks(a for spec in self.stages for a in spec.actions))

    def effective_kind(self, a: Action) -> Kind:
        """The kind `a` acts as here (schedules.actions.effective_kind): a B of a
        split backward is its I."""
        return effective_kind(a.kind, (a.stage, a.microbatch) in self.split_blocks)

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
