"""Shared pieces of the generators: the `adjusted` argument, the 1F1B-shaped row,
and assembling a validated Schedule.
"""
from __future__ import annotations

from typing import Sequence

from schedules.errors import ScheduleError
from schedules.ir import Action, Kind, Schedule, StageSpec
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
    rec = tuple(recompute)
    if not rec or not all(isinstance(r, str) and r for r in rec):
        raise ScheduleError(f"recompute must be a non-empty tuple of op or preset names, got {recompute!r}")
    return rec


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
    """Forwards listed before the first backward."""
    n = 0
    for a in row:
        if a.kind == Kind.B:
            break
        n += a.kind == Kind.F
    return n


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
