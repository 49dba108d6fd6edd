"""The optimizer step that ends an iteration, after its last action: a Timeline's
`optimizer` (schedules.timeline). Its end is the iteration time, the denominator of
the bubble fraction (schedules.timeline.BUBBLE_DEFINITION)."""
from __future__ import annotations

from dataclasses import dataclass

from schedules.errors import ScheduleError


@dataclass(frozen=True)
class OptimizerStep:
    """It starts at `start` on every device, device d steps its stages' parameters for
    `seconds[d]` (timeline units), and the iteration ends at `end` (start + the
    longest; for a measured step, its measured wall time)."""
    start: float
    seconds: tuple[float, ...]
    end: float

    @classmethod
    def after(cls, makespan: float, num_devices: int, seconds, end: float | None = None) -> "OptimizerStep":
        """A step of `seconds` (one figure for every device, or one per device) that
        starts when the last action ends (`makespan`), or, given `end` (a measured
        step's wall time), `seconds` before it (never before the last action)."""
        per = tuple(float(x) for x in seconds) if isinstance(seconds, (tuple, list)) \
            else (float(seconds),) * num_devices
        if len(per) != num_devices or min(per, default=0.0) < 0:
            raise ScheduleError(f"an optimizer step needs {num_devices} durations >= 0, got {seconds!r}")
        longest = max(per, default=0.0)
        if end is None:
            return cls(makespan, per, makespan + longest)
        start = max(makespan, float(end) - longest)
        return cls(start, per, max(float(end), start + longest))

    def to_json(self) -> dict:
        return {"start": self.start, "seconds": list(self.seconds), "end": self.end}

    @classmethod
    def from_json(cls, data: dict) -> "OptimizerStep":
        return cls(float(data["start"]), tuple(float(x) for x in data["seconds"]), float(data["end"]))
