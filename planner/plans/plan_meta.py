"""What a plan was made for, and running a plan on another model.

A plan's predictions (peaks, iteration time) hold for one model at one shape on
one device, from one profile. `PlanSource` records that: the model and its layer
count, sequence length, micro-batch, dtypes, the profile's device and file (name
and sha256 of its bytes). `obscura-plan/1` files written before these keys existed
still load (source None): their model cannot be checked.

`mismatches` lists what differs between a plan's source and a run; a run that
differs is refused unless it asks to run the plan scaled down: the plan's
schedule, per-stage recompute sets and swap settings on the run's model, the
partition mapped proportionally onto its units (`scale_partition`):

    plan on 178 units:   [0, 23)  [23, 45) ... [155, 178)     (8 stages)
    run on 10 units:     boundary b -> round(b * 10 / 178), kept strictly increasing
                         [0, 2)   [2, 3)   ...  [9, 10)

Such a run is "not comparable": nothing the plan predicts applies to it.
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from models.config import CONFIGS
from planner.errors import PlanError

SOURCE_KEYS = ("model", "num_layers", "seq_len", "micro_batch", "param_dtype", "compute_dtype",
               "device", "profile", "profile_sha256")


@dataclass(frozen=True)
class PlanSource:
    model: str
    num_layers: int
    seq_len: int
    micro_batch: int
    param_dtype: str | None = None      # None: the model is not registered here, dtypes unknown
    compute_dtype: str | None = None
    device: str = ""
    profile: str | None = None          # the profile file's name (None: built in memory)
    profile_sha256: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.model, str) or not self.model:
            raise PlanError(f"plan 'model' must be a non-empty string, got {self.model!r}")
        for name in ("num_layers", "seq_len", "micro_batch"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise PlanError(f"plan '{name}' must be a positive integer, got {v!r}")
        for name in ("param_dtype", "compute_dtype", "profile", "profile_sha256"):
            v = getattr(self, name)
            if v is not None and not isinstance(v, str):
                raise PlanError(f"plan '{name}' must be a string or null, got {v!r}")
        if not isinstance(self.device, str):
            raise PlanError(f"plan 'device' must be a string, got {self.device!r}")

    @classmethod
    def of_profile(cls, profile, path=None) -> "PlanSource":
        """The source of a plan made from `profile` (read from `path`, if any). Dtypes
        come from the registered config of the profile's model, when there is one."""
        cfg = CONFIGS.get(profile.model)
        name = sha = None
        if path is not None:
            name, sha = Path(path).name, file_sha256(path)
        return cls(profile.model, profile.num_layers, profile.seq_len, profile.micro_batch,
                   cfg.param_dtype if cfg else None, cfg.compute_dtype if cfg else None,
                   profile.device, name, sha)

    def to_json(self) -> dict:
        return {k: getattr(self, k) for k in SOURCE_KEYS}

    def describe(self) -> str:
        return f"{self.model} ({self.num_layers} layers, seq {self.seq_len}, micro-batch {self.micro_batch})"

    @property
    def base_model(self) -> str:
        """The registered model the plan's model derives from: "llama2-13b@60L" (a
        profile derived to 60 layers, planner.profile.derive_profile) is llama2-13b
        run with 60 layers."""
        m = re.fullmatch(r"(.+)@(\d+)L", self.model)
        return m.group(1) if m and int(m.group(2)) == self.num_layers else self.model


def source_from_json(d: dict) -> PlanSource | None:
    """The plan's source keys, or None when the plan has none (written before them)."""
    if not any(k in d for k in SOURCE_KEYS):
        return None
    for key in ("model", "num_layers", "seq_len", "micro_batch"):
        if key not in d:
            raise PlanError(f"plan has model metadata but is missing key {key!r}")
    return PlanSource(**{k: d[k] for k in SOURCE_KEYS if k in d})


def layout_from_json(d: dict) -> tuple[int, int]:
    """A plan's stage mesh (data, tensor): its optional "layout" key; a plan
    without one (every plan before stage meshes) was made for one device a stage."""
    layout = d.get("layout", {"data": 1, "tensor": 1})
    if not isinstance(layout, dict) or set(layout) != {"data", "tensor"}:
        raise PlanError(f"plan 'layout' must be {{\"data\": D, \"tensor\": T}}, got {str(layout)[:60]}")
    for key in ("data", "tensor"):
        v = layout[key]
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise PlanError(f"plan layout {key!r} must be a positive integer, got {v!r}")
    return layout["data"], layout["tensor"]


def file_sha256(path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def mismatches(source: PlanSource, cfg, seq_len: int, micro_batch: int) -> list[str]:
    """What differs between the plan's source and a run of `cfg` (a ModelConfig) at
    (seq_len, micro_batch), as "what: plan vs run" phrases."""
    out = []
    pairs: list[tuple[str, Any, Any]] = [("model", source.base_model, cfg.name),
                                         ("layers", source.num_layers, cfg.num_layers),
                                         ("seq_len", source.seq_len, seq_len),
                                         ("micro_batch", source.micro_batch, micro_batch)]
    for name in ("param_dtype", "compute_dtype"):
        if getattr(source, name) is not None:
            pairs.append((name, getattr(source, name), getattr(cfg, name)))
    for what, planned, run in pairs:
        if planned != run:
            out.append(f"{what} {planned} vs {run}")
    return out


def scale_partition(partition: Sequence[tuple[int, int]], num_units: int) -> tuple[tuple[int, int], ...]:
    """The partition's stage boundaries mapped proportionally onto `num_units` units,
    every stage keeping at least one unit (see the module docstring)."""
    p = len(partition)
    total = partition[-1][1]
    if p > num_units:
        raise PlanError(f"the plan's {p} stages cannot be mapped onto {num_units} units")
    bounds = [0]
    for s, (_, end) in enumerate(partition[:-1], start=1):
        b = round(end * num_units / total)
        bounds.append(min(max(b, bounds[-1] + 1), num_units - (p - s)))
    bounds.append(num_units)
    return tuple((a, b) for a, b in zip(bounds, bounds[1:]))
