"""StageCosts: the one cost model shared by the simulator and the planner.

Times in seconds (or any unit, used consistently), sizes in bytes. All per-stage
fields are tuples of length p (p = model stages; a device running several stages,
as in interleaved or V-shape schedules, gets one entry per stage). The backward of
an adjusted stage (one whose schedule row recomputes) takes bwd + recompute; its
kept activations are act_bytes_recompute instead of act_bytes.

A split backward (zero-bubble style) runs I, the input-gradient half, and W, the
weight-gradient half. By default I takes bwd * (1 - weight_grad_fraction) and W
bwd * weight_grad_fraction, so I + W = B; `input_grad` / `weight_grad` (per-stage
tuples) price them explicitly instead. Recompute, on an adjusted stage, is part of
I (it runs before the input gradient). `freed_by_input_grad` is the bytes of a
micro-batch's residuals the I step frees (what only the input gradient needs); the
rest stays live until W. These three stay empty when not given (the defaults are
derived on use), so costs written before they existed read unchanged.

JSON form (`obscura simulate --costs costs.json`, `to_json`/`from_json`): an object
whose keys are the field names above; per-stage fields are lists of p numbers (or
one number for every stage), `fwd` (a list, it fixes p) and `bwd` are required,
the rest default as in the dataclass (an empty list for `input_grad`, `weight_grad`
or `freed_by_input_grad` means the derived default), and an infinite bandwidth is
written as null. An optional
"format": "obscura-costs/1" key is accepted. Example:

    {"fwd": [1, 1, 1, 1], "bwd": [2, 2, 2, 2], "recompute": 1.0,
     "act_bytes": 4e9, "act_bytes_recompute": 1e9, "host_bandwidth": 5.5e10,
     "p2p_latency": 1e-5, "p2p_bandwidth": null}
"""
from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace

from schedules.errors import ScheduleError


# Bounds that keep every sum the simulator forms finite and meaningful: no device
# holds an exabyte, and no op or transfer lasts 1e12 time units (in seconds: 30,000
# years); larger values are unit mistakes (e.g. bytes where GB were meant).
MAX_BYTES = 1e18
MAX_TIME = 1e12
_BYTE_FIELDS = ("act_bytes", "act_bytes_recompute", "weight_bytes", "boundary_bytes", "freed_by_input_grad",
                "weight_grad_held")


def _tuple(name: str, values, p: int) -> tuple[float, ...]:
    vals = tuple(float(v) for v in values)
    if len(vals) != p:
        raise ScheduleError(f"StageCosts.{name} has {len(vals)} entries for {p} stages")
    bound, unit = (MAX_BYTES, "bytes") if name in _BYTE_FIELDS else (MAX_TIME, "time units")
    for v in vals:
        if not math.isfinite(v) or v < 0:
            raise ScheduleError(f"StageCosts.{name} must be finite and >= 0, got {v}")
        if v > bound:
            raise ScheduleError(f"StageCosts.{name} must be <= {bound:.0e} {unit} (larger values overflow the "
                                f"simulator's sums and are unit mistakes), got {v:g}")
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
    input_grad: tuple[float, ...] = ()           # I time per stage; empty: bwd * (1 - weight_grad_fraction)
    weight_grad: tuple[float, ...] = ()          # W time per stage; empty: bwd * weight_grad_fraction
    freed_by_input_grad: tuple[float, ...] = ()  # residual bytes per micro-batch I frees; empty: 0
    weight_grad_held: tuple[float, ...] = ()     # bytes per micro-batch a W holds from the end of its I
                                                 # (what W reads: matmul inputs, output cotangents);
                                                 # empty: the block less freed_by_input_grad
    optimizer: tuple[float, ...] = ()            # optimizer step seconds per stage after the flush; empty: 0
    action_overhead: float = 0.0                 # launch/dispatch seconds added to every F, B, I, W
    link_sharing: float = 0.0                    # share of a p2p link a swapping neighbour's copies take

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
        for name in _OPTIONAL:
            vals = getattr(self, name)
            object.__setattr__(self, name, _tuple(name, vals, p) if vals else ())
        if self.p2p_latency < 0 or self.p2p_bandwidth <= 0 or self.host_bandwidth <= 0:
            raise ScheduleError("StageCosts: latency must be >= 0 and bandwidths > 0")
        if not (self.p2p_latency <= MAX_TIME):
            raise ScheduleError(f"StageCosts.p2p_latency must be <= {MAX_TIME:.0e} time units, got {self.p2p_latency}")
        for name, nbytes in (("host_bandwidth", max(self.act_bytes + self.act_bytes_recompute)),
                             ("p2p_bandwidth", max(self.boundary_bytes))):
            bw = getattr(self, name)
            if bw != bw or (nbytes > 0 and nbytes / bw > MAX_TIME):
                raise ScheduleError(f"StageCosts.{name} {bw:g} is too low: moving {nbytes:g} bytes would take "
                                    f"{nbytes / bw:.3g} time units, more than {MAX_TIME:.0e} (check the units)")
        if not 0.0 <= self.weight_grad_fraction <= 1.0:
            raise ScheduleError("StageCosts.weight_grad_fraction must be in [0, 1]")
        if not (math.isfinite(self.action_overhead) and self.action_overhead >= 0):
            raise ScheduleError("StageCosts.action_overhead must be finite and >= 0")
        if not 0.0 <= self.link_sharing <= 0.9:
            raise ScheduleError("StageCosts.link_sharing must be in [0, 0.9]")

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
                     if k in ("act_bytes", "act_bytes_recompute", "weight_bytes", "boundary_bytes") + _OPTIONAL}
        per_stage = {k: (v,) * p if isinstance(v, (int, float)) else v for k, v in per_stage.items()}
        return cls(fwd=(fwd,) * p, bwd=(bwd,) * p, recompute=(recompute,) * p, **per_stage, **kwargs)

    def backward_time(self, stage: int, adjusted: bool) -> float:
        return self.bwd[stage] + (self.recompute[stage] if adjusted else 0.0)

    def recompute_share(self, stage: int, adjusted: bool, split: bool = False) -> float:
        """The share of a backward (of I when `split`) spent recomputing: what a
        measured Gantt chart hatches (schedules.timeline.with_recompute_shares)."""
        if not adjusted or not self.recompute[stage]:
            return 0.0
        rest = self.input_grad_time(stage) if split else self.bwd[stage]
        return self.recompute[stage] / (rest + self.recompute[stage])

    def input_grad_time(self, stage: int) -> float:
        """I, the input-gradient half of a split backward (without recompute)."""
        if self.input_grad:
            return self.input_grad[stage]
        return self.bwd[stage] * (1.0 - self.weight_grad_fraction)

    def weight_grad_time(self, stage: int) -> float:
        """W, the weight-gradient half of a split backward."""
        if self.weight_grad:
            return self.weight_grad[stage]
        return self.bwd[stage] * self.weight_grad_fraction

    def input_grad_frees(self, stage: int) -> float:
        """Bytes of one micro-batch's residuals that I frees, at most all of them
        (act_bytes: on a recomputing stage I has re-materialised them)."""
        freed = self.freed_by_input_grad[stage] if self.freed_by_input_grad else 0.0
        return min(freed, self.act_bytes[stage])

    def weight_grad_held_bytes(self, stage: int) -> float | None:
        """What one micro-batch's block becomes at the end of its I (None: not measured,
        the block less `input_grad_frees`)."""
        return self.weight_grad_held[stage] if self.weight_grad_held else None

    def kept_bytes(self, stage: int, adjusted: bool) -> float:
        return self.act_bytes_recompute[stage] if adjusted else self.act_bytes[stage]

    def p2p_time(self, stage: int, shared: bool = False) -> float:
        """Time to move one micro-batch's boundary activation (or its grad) between
        stage and stage+1; `shared`: a stage on either side swaps, and its copies
        take `link_sharing` of the link's bandwidth."""
        if self.boundary_bytes[stage] == 0 and self.p2p_latency == 0:
            return 0.0
        bandwidth = self.p2p_bandwidth * (1.0 - self.link_sharing if shared else 1.0)
        return self.p2p_latency + self.boundary_bytes[stage] / bandwidth

    def optimizer_time(self, stage: int) -> float:
        return self.optimizer[stage] if self.optimizer else 0.0

    def swap_time(self, stage: int, fraction: float, adjusted: bool) -> float:
        return self.kept_bytes(stage, adjusted) * fraction / self.host_bandwidth

    def with_(self, **changes) -> "StageCosts":
        return replace(self, **changes)

    def to_json(self) -> dict:
        """Field name -> value; infinite bandwidths become null (JSON has no inf)."""
        out = {}
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name in _REALISM and v == f.default:
                continue   # written only when set: costs from before these terms read the same
            out[f.name] = list(v) if isinstance(v, tuple) else (None if v == math.inf else v)
        return out

    @classmethod
    def from_json(cls, data) -> "StageCosts":
        if not isinstance(data, dict):
            raise ScheduleError("costs JSON: top level must be an object")
        data = dict(data)
        fmt = data.pop("format", "obscura-costs/1")
        if fmt != "obscura-costs/1":
            raise ScheduleError(f"costs JSON: format must be 'obscura-costs/1', got {fmt!r}")
        known = {f.name for f in fields(cls)}
        data = {k: v for k, v in data.items() if k in known}   # others ignored (docs/formats.md): newer writers' keys
        if not isinstance(data.get("fwd"), list) or not data["fwd"]:
            raise ScheduleError("costs JSON: 'fwd' must be a non-empty list (one forward time per stage)")
        p = len(data["fwd"])
        if "bwd" not in data:
            raise ScheduleError("costs JSON: 'bwd' is required (backward time per stage)")
        kwargs = {}
        for name, v in data.items():
            if name in _PER_STAGE:
                if isinstance(v, (int, float)) and not isinstance(v, bool):
                    v = [v] * p
                if not isinstance(v, list) or not all(isinstance(x, (int, float)) and not isinstance(x, bool)
                                                      for x in v):
                    raise ScheduleError(f"costs JSON: {name!r} must be a number or a list of {p} numbers")
                kwargs[name] = tuple(v)
            else:
                if v is None and name in ("p2p_bandwidth", "host_bandwidth"):
                    v = math.inf
                if isinstance(v, bool) or not isinstance(v, (int, float)):
                    raise ScheduleError(f"costs JSON: {name!r} must be a number, got {v!r}")
                if math.isnan(v) or (math.isinf(v) and name not in ("p2p_bandwidth", "host_bandwidth")):
                    raise ScheduleError(f"costs JSON: {name!r} must be finite, got {v!r}")
                kwargs[name] = float(v)
        return cls(**kwargs)


_OPTIONAL = ("input_grad", "weight_grad", "freed_by_input_grad", "weight_grad_held", "optimizer")
_REALISM = ("optimizer", "action_overhead", "link_sharing")   # calibration terms (schedules.calibration)
_PER_STAGE = ("fwd", "bwd", "recompute", "act_bytes", "act_bytes_recompute", "weight_bytes", "boundary_bytes") \
    + _OPTIONAL
