"""The one measured number of a run, and which step the charts show.

A run's timed steps are those after `warmup_steps` (all of them when the run has
no more steps than that). Every timed step is recorded (obscura_jax.observe.events: its
actions, transfers and optimizer step are timed as it runs), so each timed step
costs the same. The run's measured iteration time is the MEDIAN of the timed
steps' wall times, taken as the lower middle one with an even count, so that it
is one real step: the charted step. The measured timeline, Gantt chart and trace
show that step, from its start (before its first dispatch) to its end (its
parameters updated), so the trace's makespan IS the iteration time; min, median
and max of the timed steps say how much the steps spread.
"""
from __future__ import annotations

from typing import Sequence


def timed(logs: Sequence, warmup_steps: int) -> list:
    """The timed steps of this run's step logs (each has `.seconds`)."""
    logs = list(logs)
    return logs[warmup_steps:] if len(logs) > warmup_steps else logs


def first_timed_step(start_step: int, steps: int, warmup_steps: int) -> int:
    """The 0-based index of the first timed step of a run over steps start_step..steps-1."""
    return start_step + (warmup_steps if steps - start_step > warmup_steps else 0)


def median_step(steps: Sequence):
    """The step whose time is the lower median of `steps`' times (None if empty):
    ties go to the earliest step."""
    if not steps:
        return None
    ranked = sorted(steps, key=lambda s: s[1] if isinstance(s, (list, tuple)) else s.seconds)
    return ranked[(len(ranked) - 1) // 2]


def spread(values: Sequence[float]) -> dict | None:
    """{"min", "median", "max"} of measured seconds (the lower median: one real sample)."""
    if not values:
        return None
    ranked = sorted(values)
    return {"min": ranked[0], "median": ranked[(len(ranked) - 1) // 2], "max": ranked[-1]}
