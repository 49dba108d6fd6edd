"""Shared pieces of the generators: the preamble every generator starts with
(`setup`: sizes, virtual stages, `adjusted`, recompute, a warm-up override), the 1F1B-shaped row, and
assembling a validated Schedule (one stage per device, or device rows; with the
swap pass first: swap.swapped_schedule).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from schedules.errors import ScheduleError
from schedules.ir import BACKWARD_INPUT_KINDS, Action, Kind, Schedule, StageSpec
from schedules.validator import validate


def check_sizes(num_stages, num_microbatches) -> tuple[int, int]:
    for what, v in (("number of stages", num_stages), ("number of micro-batches", num_microbatches)):
        if isinstance(v, bool) or not isinstance(v, int):
            raise ScheduleError(f"{what} must be an integer, got {v!r}")
        if v < 1:
            raise ScheduleError(f"{what} must be >= 1, got {v}")
    return num_stages, num_microbatches


def resolve_adjusted(adjusted, num_stages: int) -> tuple[int, ...]:
    """None -> (); int K -> stages 0..K; "all" -> every stage; a sequence -> those stages."""
    p = num_stages
    if adjusted is None:
        return ()
    if isinstance(adjusted, str):
        text = adjusted.strip().lower()
        if text == "all":
            return tuple(range(p))
        if text in ("none", "non", ""):
            return ()
        try:
            adjusted = int(text)
        except ValueError:
            raise ScheduleError(f"adjusted must be an integer K (stages 0..K), 'all' or 'none', got {adjusted!r}") from None
    if isinstance(adjusted, bool):
        raise ScheduleError(f"adjusted must be an integer K, 'all' or a tuple of stages, got {adjusted!r}")
    if isinstance(adjusted, int):
        if not 0 <= adjusted < p:
            raise ScheduleError(f"adjusted K={adjusted} must be in 0..{p - 1} (stages 0..K recompute) for {p} stages")
        return tuple(range(adjusted + 1))
    stages = tuple(sorted(set(adjusted)))
    for s in stages:
        if isinstance(s, bool) or not isinstance(s, int) or not 0 <= s < p:
            raise ScheduleError(f"adjusted stage {s!r} is not in 0..{p - 1}")
    return stages


def check_recompute(recompute) -> tuple[str, ...]:
    if isinstance(recompute, str):
        recompute = (recompute,)
    try:
        rec = tuple(recompute)
    except TypeError:
        raise ScheduleError(f"recompute must be a non-empty tuple of op or preset names, got {recompute!r}") from None
    if not rec or not all(isinstance(r, str) and r for r in rec):
        raise ScheduleError(f"recompute must be a non-empty tuple of op or preset names, got {recompute!r}")
    return rec


@dataclass(frozen=True)
class Setup:
    """A generator's checked arguments: the pipeline depth p (devices), the
    micro-batches m, the model stages it builds (p, or p x V for V per device),
    the adjusted model stages, the recompute set they get, and the per-device
    warm-up override (None: the generator's own)."""
    num_devices: int
    num_microbatches: int
    num_stages: int
    adjusted: tuple[int, ...]
    recompute: tuple[str, ...]
    warmup: tuple[int, ...] | None = None


def setup(num_stages, num_microbatches, adjusted, recompute, stages_per_device=1, warmup=None,
          adjusted_default=None) -> Setup:
    """The preamble every generator starts with, one rule for all: sizes checked
    (integers >= 1), `stages_per_device` checked (virtual stages: an integer >= 1),
    `adjusted` resolved over the model stages (`stages_per_device` x p of them;
    None means `adjusted_default`), the recompute set checked, and a `warmup`
    override checked (one integer >= 1 per device)."""
    p, m = check_sizes(num_stages, num_microbatches)
    n = p * check_virtual_stages(stages_per_device)
    adj = resolve_adjusted(adjusted_default if adjusted is None else adjusted, n)
    rec = check_recompute(recompute)
    return Setup(p, m, n, adj, rec, None if warmup is None else check_warmup(warmup, p))


def check_warmup(warmup, count: int) -> tuple[int, ...]:
    """A per-row warm-up override: `count` integers >= 1."""
    try:
        warm = tuple(warmup)
    except TypeError:
        raise ScheduleError(f"warmup must hold {count} integers >= 1, got {warmup!r}") from None
    if len(warm) != count or not all(isinstance(w, int) and not isinstance(w, bool) and w >= 1 for w in warm):
        raise ScheduleError(f"warmup must hold {count} integers >= 1, got {warmup!r}")
    return warm


def one_f_one_b_row(stage: int, num_microbatches: int, warmup: int) -> list[Action]:
    """`warmup` forwards, then backward/forward pairs, then the remaining backwards."""
    m = num_microbatches
    w = max(1, min(warmup, m))
    row = [Action(stage, Kind.F, x) for x in range(w)]
    for x in range(m):
        row.append(Action(stage, Kind.B, x))
        if w + x < m:
            row.append(Action(stage, Kind.F, w + x))
    return row


def warmup_count(row: Sequence[Action]) -> int:
    """Forwards listed before the first backward (B or I)."""
    n = 0
    for a in row:
        if a.kind in BACKWARD_INPUT_KINDS:
            break
        n += a.kind == Kind.F
    return n


def check_virtual_stages(virtual_stages) -> int:
    if isinstance(virtual_stages, bool) or not isinstance(virtual_stages, int) or virtual_stages < 1:
        raise ScheduleError(f"virtual stages must be an integer >= 1, got {virtual_stages!r}")
    return virtual_stages


def assemble_devices(name: str, num_microbatches: int, rows: Sequence[Sequence[Action]],
                     stage_to_device: Sequence[int], adjusted: Sequence[int], recompute: tuple[str, ...],
                     swap_fraction: float = 0.0) -> Schedule:
    """A validated Schedule from device rows. A stage gets beta if any of its blocks
    is swapped, and as lambda the number of its blocks evicted before its device's
    first backward."""
    p = len(stage_to_device)
    specs = []
    for s in range(p):
        row = rows[stage_to_device[s]]
        first_b = next((i for i, a in enumerate(row) if a.kind in BACKWARD_INPUT_KINDS), len(row))
        lam = sum(1 for a in row[:first_b] if a.stage == s and a.kind == Kind.SO)
        swapped = any(a.stage == s and a.kind == Kind.SO for a in row)
        specs.append(StageSpec((), recompute if s in adjusted else (), swap_fraction if swapped else 0.0, lam))
    schedule = Schedule(name, p, num_microbatches, tuple(specs), tuple(stage_to_device),
                        tuple(tuple(r) for r in rows))
    validate(schedule)
    return schedule


def assemble(name: str, num_microbatches: int, rows: Sequence[Sequence[Action]],
             adjusted: Sequence[int], recompute: tuple[str, ...],
             swap_blocks: Sequence[int] | None = None, swap_fraction: float = 0.0) -> Schedule:
    p = len(rows)
    lam = tuple(swap_blocks) if swap_blocks is not None else (0,) * p
    stages = tuple(StageSpec(tuple(rows[s]), recompute if s in adjusted else (),
                             swap_fraction if lam[s] else 0.0, lam[s]) for s in range(p))
    schedule = Schedule(name, p, num_microbatches, stages)
    validate(schedule)
    return schedule
