"""StageCosts: the one cost model shared by the simulator and the planner.

Times in seconds (or any unit, used consistently), sizes in bytes. All per-stage
fields are tuples of length p. The backward of an adjusted stage (one whose
schedule row recomputes) takes bwd + recompute; its kept activations are
act_bytes_recompute instead of act_bytes.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from schedules.errors import ScheduleError


def _tuple(name: str, values, p: int) -> tuple[float, ...]:
    vals = tuple(float(v) for v in values)
    if len(vals) != p:
        raise ScheduleError(f"StageCosts.{name} has {len(vals)} entries for {p} stages")
    for v in vals:
        if not math.isfinite(v) or v < 0:
            raise ScheduleError(f"StageCosts.{name} must be finite and >= 0, got {v}")
    return vals


@dataclass(frozen=True)
class StageCosts:
    fwd: tuple[float, ...]
    bwd: tuple[float, ...]
    recompute: tuple[float, ...] = ()
    act_bytes: tuple[float, ...] = ()            # kept per micro-batch, no recompute
    act_bytes_recompute: tuple[float, ...] = ()  # kept per micro-batch on an adjusted stage
    weight_bytes: tuple[float, ...] = ()         # params + grads + optimizer state
    boundary_bytes: tuple[float, ...] = ()       # activation sent s -> s+1 per micro-batch (grad goes back)
    p2p_latency: float = 0.0
    p2p_bandwidth: float = math.inf
    host_bandwidth: float = math.inf             # per direction (full duplex)
    weight_grad_fraction: float = 0.5            # share of bwd done by W when a schedule splits B/W

    def __post_init__(self) -> None:
        p = len(self.fwd)
        if p < 1:
            raise ScheduleError("StageCosts needs at least one stage")
        zeros = (0.0,) * p
        for name in ("fwd", "bwd", "recompute", "act_bytes", "act_bytes_recompute",
                     "weight_bytes", "boundary_bytes"):
            vals = getattr(self, name)
            if name == "act_bytes_recompute" and not vals:
                vals = getattr(self, "act_bytes") or zeros
            object.__setattr__(self, name, _tuple(name, vals or zeros, p))
        if self.p2p_latency < 0 or self.p2p_bandwidth <= 0 or self.host_bandwidth <= 0:
            raise ScheduleError("StageCosts: latency must be >= 0 and bandwidths > 0")
        if not 0.0 <= self.weight_grad_fraction <= 1.0:
            raise ScheduleError("StageCosts.weight_grad_fraction must be in [0, 1]")

    @property
    def num_stages(self) -> int:
        return len(self.fwd)

    @classmethod
    def uniform(cls, num_stages: int, fwd: float = 1.0, bwd: float = 2.0, recompute: float = 1.0,
                **kwargs) -> "StageCosts":
        p = num_stages
        if p < 1:
            raise ScheduleError(f"number of stages must be >= 1, got {p}")
        per_stage = {k: kwargs.pop(k) for k in list(kwargs)
                     if k in ("act_bytes", "act_bytes_recompute", "weight_bytes", "boundary_bytes")}
        per_stage = {k: (v,) * p if isinstance(v, (int, float)) else v for k, v in per_stage.items()}
        return cls(fwd=(fwd,) * p, bwd=(bwd,) * p, recompute=(recompute,) * p, **per_stage, **kwargs)

    def backward_time(self, stage: int, adjusted: bool) -> float:
        return self.bwd[stage] + (self.recompute[stage] if adjusted else 0.0)

    def kept_bytes(self, stage: int, adjusted: bool) -> float:
        return self.act_bytes_recompute[stage] if adjusted else self.act_bytes[stage]

    def p2p_time(self, stage: int) -> float:
        """Time to move one micro-batch's boundary activation (or its grad) between
        stage and stage+1."""
        if self.boundary_bytes[stage] == 0 and self.p2p_latency == 0:
            return 0.0
        return self.p2p_latency + self.boundary_bytes[stage] / self.p2p_bandwidth

    def swap_time(self, stage: int, fraction: float, adjusted: bool) -> float:
        return self.kept_bytes(stage, adjusted) * fraction / self.host_bandwidth

    def with_(self, **changes) -> "StageCosts":
        return replace(self, **changes)
