"""The one registry of schedule generators, and `generate` (validated output).

Every generator is a pure function
    gen(num_stages, num_microbatches, *, adjusted, recompute, swap_blocks,
        swap_fraction, costs=None, **extra) -> Schedule
and each module's docstring shows its order for p=4, m=8.
"""
from __future__ import annotations

from schedules.errors import ScheduleError
from schedules.generators.gpipe import gpipe
from schedules.generators.obscura import obscura
from schedules.generators.one_f_one_b import one_f_one_b, recomp
from schedules.generators.strawman import strawman
from schedules.ir import Schedule
from schedules.validator import validate

SCHEDULES = {
    "gpipe": gpipe,
    "1f1b": one_f_one_b,
    "recomp": recomp,
    "strawman": strawman,
    "obscura": obscura,
}


def generate(name: str, num_stages: int, num_microbatches: int, *, adjusted=None, recompute=("full",),
             swap_blocks=0, swap_fraction: float = 0.0, **extra) -> Schedule:
    """Build schedule `name` (see SCHEDULES) and validate it.

    adjusted: None | K (stages 0..K recompute) | "all" | a tuple of stage indices.
    None means no recompute for gpipe/1f1b and "all" for recomp/strawman/obscura.
    recompute: what adjusted stages' StageSpec.recompute holds (op or preset names).
    swap_blocks: lambda at the last adjusted stage (earlier ones +1 each) or a
    per-stage tuple; swap_fraction: beta. `extra` is generator-specific (e.g.
    costs=StageCosts, warmup=tuple for 1f1b/recomp/obscura).
    """
    try:
        gen = SCHEDULES[name]
    except (KeyError, TypeError):
        raise ScheduleError(f"unknown schedule {name!r}; valid: {', '.join(SCHEDULES)}") from None
    try:
        schedule = gen(num_stages, num_microbatches, adjusted=adjusted, recompute=recompute,
                       swap_blocks=swap_blocks, swap_fraction=swap_fraction, **extra)
    except TypeError as e:
        raise ScheduleError(f"schedule {name!r}: {e}") from None
    validate(schedule)
    return schedule
