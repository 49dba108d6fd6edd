"""Profiles (obscura-profile/1): per unit kind, measured or derived costs.

A profile describes one model at one (seq_len, micro_batch) on one device:
per unit kind (embed, attn, mlp, head) its forward and backward time, its weight
bytes (params + grads + optimizer state), its input bytes, and per named op its
forward time and the activation bytes it keeps. The 2L+2 partition units are
`embed, attn_0, mlp_0, ..., attn_{L-1}, mlp_{L-1}, head`; every unit of a kind
costs the same.

Under a recompute set R (op names, or the preset "full") a unit keeps
    input_bytes + sum(act_bytes of its ops not in R)     ("full": input_bytes)
per micro-batch and redoes
    min(sum(fwd_time of its ops in R), full)     ("full": full)
inside its backward, where full = the unit's optional `full_recompute_time`, else
its fwd_time (design.md, "Profile JSON"; the cap is ours: recomputing part of a unit
never costs more than all of it). `full_recompute_time` is an optional extra key: a
backward recomputes only what it needs (XLA drops e.g. mlp_down, whose output only
feeds the residual add), so a measured full recompute can cost well under the whole
forward (54% of a Llama-2-13B layer's on the H200, results/h200/stage_mfu.json).

Optional per unit (absent in profiles written before them, which load unchanged):
the split backward's I and W times, what a W holds from its I, the same W when it
re-derives its inputs, and the XLA scratch of a unit's programs. docs/formats.md,
"Profile JSON", says what each is and how the planner prices a profile without them.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, replace
from typing import Any, Iterable, Mapping

from models.config import CONFIGS
from models.errors import ObscuraError
from models.registry import BLOCK_KINDS, LAYOUTS, UNIT_KINDS, family_names, ops_for, unit_ops
from planner.errors import ProfileError
from schedules.formats.jsonio import load_document, write_json_atomic

PROFILE_FORMAT = "obscura-profile/1"
MAX_LAYERS = 4096     # a bound of the planner, which walks every unit: 32x the layers of today's largest models
OPTIONAL_UNIT_KEYS = ("full_recompute_time", "input_grad_time", "weight_grad_time", "weight_grad_bytes",
                       "scratch_bytes", "weight_grad_rederive_time", "weight_grad_rederive_bytes",
                       "weight_grad_made_bytes", "weight_grad_beside_bytes")
FULL = "full"  # preset: recompute the whole unit forward, keep only its input
LAYER = "layer"  # one checkpoint per transformer layer (attn + mlp), keep only the layer input


def unit_kinds(num_layers: int, layout: tuple[str, ...] = UNIT_KINDS) -> tuple[str, ...]:
    """Kind of each partition unit, in order: 2L+2 (embed, attn, mlp x L, head), or
    L+2 for a parallel-block profile (layout BLOCK_KINDS: embed, block x L, head)."""
    return ("embed",) + tuple(layout[1:-1]) * num_layers + ("head",)


def _layout(kinds) -> tuple[str, ...]:
    """The unit-kind layout a profile's `units` keys match (one profile holds one)."""
    for layout in LAYOUTS:
        if set(kinds) == set(layout):
            return layout
    missing = [k for k in UNIT_KINDS if k not in kinds]
    extra = sorted(set(kinds) - set(UNIT_KINDS) - set(BLOCK_KINDS))
    if extra:
        raise ProfileError(f"profile has unknown unit kind {extra[0]!r} (expected {', '.join(UNIT_KINDS)}, "
                           f"or {', '.join(BLOCK_KINDS)} for a parallel block)")
    raise ProfileError(f"profile is missing unit {missing[0]!r}" if missing else
                       f"profile mixes unit kinds {', '.join(sorted(kinds))}")


def _number(where: str, value: Any, *, positive: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ProfileError(f"{where} must be a number, got {value!r}")
    v = float(value)
    if not math.isfinite(v):
        raise ProfileError(f"{where} must be finite, got {value!r}")
    if positive and v <= 0:
        raise ProfileError(f"{where} must be > 0, got {value!r}")
    if v < 0:
        raise ProfileError(f"{where} is negative ({value!r})")
    return v


def _integer(where: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ProfileError(f"{where} must be a positive integer, got {value!r}")
    return value


@dataclass(frozen=True)
class OpProfile:
    fwd_time: float   # seconds to (re)compute the op's output once
    act_bytes: float  # bytes of its output kept per micro-batch when not recomputed

    def __post_init__(self) -> None:
        object.__setattr__(self, "fwd_time", _number("op fwd_time", self.fwd_time))
        object.__setattr__(self, "act_bytes", _number("op act_bytes", self.act_bytes))


@dataclass(frozen=True)
class UnitProfile:
    fwd_time: float
    bwd_time: float
    weight_bytes: float  # params + grads + optimizer state
    input_bytes: float   # always kept (the unit's input is its checkpoint)
    ops: tuple[tuple[str, OpProfile], ...] = ()
    full_recompute_time: float | None = None  # measured cost of "full"; None: fwd_time
    input_grad_time: float | None = None      # I of the split backward (None: bwd_time / 2)
    weight_grad_time: float | None = None     # W of the split backward (None: bwd_time / 2)
    weight_grad_bytes: float | None = None    # what a W holds from its I: weight ops' inputs + output cotangents
    scratch_bytes: float | None = None        # XLA scratch (temp buffers) of its programs; None: not measured (0)
    weight_grad_rederive_time: float | None = None   # W that re-derives its inputs (--weight-grad rederive)
    weight_grad_rederive_bytes: float | None = None  # what that W holds: output cotangents + the unit's input
    weight_grad_made_bytes: float | None = None      # of weight_grad_bytes, what I computes (its outputs)
    weight_grad_beside_bytes: float | None = None    # of those, what I allocates beside the residuals

    def __post_init__(self) -> None:
        for name in ("fwd_time", "bwd_time", "weight_bytes", "input_bytes"):
            object.__setattr__(self, name, _number(f"unit {name}", getattr(self, name)))
        for name in OPTIONAL_UNIT_KEYS:
            if getattr(self, name) is not None:
                object.__setattr__(self, name, _number(f"unit {name}", getattr(self, name)))
        ops = self.ops.items() if isinstance(self.ops, Mapping) else self.ops
        ops = tuple((str(n), o if isinstance(o, OpProfile) else OpProfile(**o)) for n, o in ops)
        if len({n for n, _ in ops}) != len(ops):
            raise ProfileError("unit lists an op twice")
        object.__setattr__(self, "ops", ops)

    @property
    def op_names(self) -> tuple[str, ...]:
        return tuple(n for n, _ in self.ops)

    @property
    def scratch(self) -> float:
        """XLA scratch of the unit's programs (0 for a profile that did not record it)."""
        return self.scratch_bytes or 0.0

    @property
    def full_recompute(self) -> float:
        """Cost of recomputing the whole unit inside its backward."""
        return self.fwd_time if self.full_recompute_time is None else self.full_recompute_time

    def op(self, name: str) -> OpProfile:
        for n, o in self.ops:
            if n == name:
                return o
        raise KeyError(name)

    def kept_bytes(self, recompute: Iterable[str] = ()) -> float:
        r = frozenset(recompute)
        if FULL in r:
            return self.input_bytes
        return self.input_bytes + sum(o.act_bytes for n, o in self.ops if n not in r)

    def recompute_time(self, recompute: Iterable[str] = ()) -> float:
        """sum(fwd_time of ops in R), at most the whole unit's fwd_time: recomputing
        part of a unit never costs more than recomputing all of it (this also keeps
        noisy per-op timings from pricing a few ops above the whole forward)."""
        r = frozenset(recompute)
        full = self.full_recompute
        if FULL in r:
            return full
        return min(sum(o.fwd_time for n, o in self.ops if n in r), full)

    def recomputed_bytes(self, recompute: Iterable[str] = ()) -> float:
        """Bytes rematerialised at once when this unit's backward recomputes R: the
        working set one micro-batch needs on top of what is kept."""
        r = frozenset(recompute)
        return sum(o.act_bytes for n, o in self.ops if FULL in r or n in r)


def family_of(model: str) -> str:
    """Model family of a profile's `model` name: the registered config's family, or
    by prefix (a registered family's name) for models not registered (profiles from
    other tools, derived ones like "llama2-13b@60L")."""
    if model in CONFIGS:
        return CONFIGS[model].family
    for family in sorted(family_names(), key=len, reverse=True):
        if model.lower().startswith(family.lower()):
            return family
    raise ProfileError(f"cannot tell the model family of {model!r}: use a registered model name or one "
                       f"starting with a registered family's name ({', '.join(family_names())}); "
                       "a model of your own is registered by its module (--model-module)")


def family_ops(family: str) -> frozenset[str]:
    """The op vocabulary of a registered family (a ProfileError if it is not registered)."""
    try:
        return frozenset(ops_for(family))
    except ObscuraError as e:
        raise ProfileError(str(e)) from None


@dataclass(frozen=True)
class Profile:
    model: str
    device: str
    num_layers: int
    seq_len: int
    micro_batch: int
    host_bandwidth: float  # bytes/s per direction
    p2p_bandwidth: float   # bytes/s between neighbouring stages
    p2p_latency: float     # seconds per transfer
    units: tuple[tuple[str, UnitProfile], ...]
    family: str = field(default="", compare=False)
    layer_recompute_time: float | None = None  # one layer under one checkpoint (policy `layer`); None: unmeasured

    def __post_init__(self) -> None:
        if self.layer_recompute_time is not None:
            object.__setattr__(self, "layer_recompute_time",
                               _number("profile layer_recompute_time", self.layer_recompute_time))
        if not isinstance(self.model, str) or not self.model:
            raise ProfileError(f"profile model must be a non-empty string, got {self.model!r}")
        if not isinstance(self.device, str) or not self.device:
            raise ProfileError(f"profile device must be a non-empty string, got {self.device!r}")
        for name in ("num_layers", "seq_len", "micro_batch"):
            _integer(f"profile {name}", getattr(self, name))
        if self.num_layers > MAX_LAYERS:
            raise ProfileError(f"profile num_layers must be <= {MAX_LAYERS} (a bound of the planner, which walks "
                               f"every unit), got {self.num_layers}")
        for name in ("host_bandwidth", "p2p_bandwidth"):
            object.__setattr__(self, name, _number(f"profile {name}", getattr(self, name), positive=True))
        object.__setattr__(self, "p2p_latency", _number("profile p2p_latency", self.p2p_latency))
        units = self.units.items() if isinstance(self.units, Mapping) else self.units
        units = dict(units)
        object.__setattr__(self, "units", tuple((k, units[k]) for k in _layout(units)))
        family = self.family or family_of(self.model)
        object.__setattr__(self, "family", family)
        vocab = family_ops(family)
        for kind, unit in self.units:
            for name in unit.op_names:
                if name not in vocab:
                    raise ProfileError(f"unknown op {name!r} in unit {kind!r} for the {family} "
                                       f"family (known: {', '.join(sorted(vocab))})")
        # a search reads units by kind and keys its caches on the profile millions of
        # times: the index, and the hash at its first use, are made once (it is frozen)
        object.__setattr__(self, "_by_kind", dict(self.units))
        object.__setattr__(self, "_kinds", unit_kinds(self.num_layers, self.layout))

    def __hash__(self) -> int:
        if "_hash" not in self.__dict__:
            object.__setattr__(self, "_hash", hash(tuple(getattr(self, f.name) for f in fields(self) if f.compare)))
        return self._hash

    def __getstate__(self) -> dict:
        # str hashes differ between processes: an unpickled profile hashes itself again
        return {k: v for k, v in self.__dict__.items() if k != "_hash"}

    def unit(self, kind: str) -> UnitProfile:
        return self._by_kind[kind]

    @property
    def layout(self) -> tuple[str, ...]:
        """UNIT_KINDS, or BLOCK_KINDS for a parallel-block model."""
        return tuple(k for k, _ in self.units)

    @property
    def layer_kinds(self) -> tuple[str, ...]:
        return self.layout[1:-1]

    @property
    def num_units(self) -> int:
        return len(self.layer_kinds) * self.num_layers + 2

    @property
    def kinds(self) -> tuple[str, ...]:
        return self._kinds

    @property
    def layer_recompute(self) -> float:
        """Seconds one layer's backward recomputes under `layer`: the measured
        `layer_recompute_time`, else the attn + mlp forward."""
        if self.layer_recompute_time is not None:
            return self.layer_recompute_time
        return sum(self.unit(k).fwd_time for k in self.layer_kinds)

    @property
    def op_names(self) -> tuple[str, ...]:
        seen: dict[str, None] = {}
        for _, unit in self.units:
            for n in unit.op_names:
                seen[n] = None
        return tuple(seen)

    def to_json(self) -> dict:
        return {
            "format": PROFILE_FORMAT, "model": self.model, "device": self.device,
            "num_layers": self.num_layers, "seq_len": self.seq_len,
            "micro_batch": self.micro_batch, "host_bandwidth": self.host_bandwidth,
            "p2p_bandwidth": self.p2p_bandwidth, "p2p_latency": self.p2p_latency,
            "units": {kind: {"fwd_time": u.fwd_time, "bwd_time": u.bwd_time,
                             "weight_bytes": u.weight_bytes, "input_bytes": u.input_bytes,
                             **{k: getattr(u, k) for k in OPTIONAL_UNIT_KEYS if getattr(u, k) is not None},
                             "ops": {n: {"fwd_time": o.fwd_time, "act_bytes": o.act_bytes}
                                     for n, o in u.ops}}
                      for kind, u in self.units},
            **({} if self.layer_recompute_time is None else {"layer_recompute_time": self.layer_recompute_time}),
            **({} if self.offered_ops() is None else {"offered_ops": list(self.offered_ops())}),
        }

    def offered_ops(self) -> tuple[str, ...] | None:
        """The ops a profile offers for recompute when it lists fewer than its family
        has (`obscura profile --policy-ops`), else None (it lists them all)."""
        listed = set(self.op_names)
        if all(op in listed for kind, _ in self.units for op in unit_ops(self.family, kind)):
            return None
        return tuple(sorted(listed))


_TOP_KEYS = ("model", "device", "num_layers", "seq_len", "micro_batch", "host_bandwidth",
             "p2p_bandwidth", "p2p_latency", "units")
_UNIT_KEYS = ("fwd_time", "bwd_time", "weight_bytes", "input_bytes")


def profile_from_json(d: Any) -> Profile:
    """Validate a decoded obscura-profile/1 document; one-line ProfileError naming
    the first problem (extra keys written by other tools are ignored)."""
    if not isinstance(d, dict):
        raise ProfileError(f"a profile must be a JSON object, got {type(d).__name__}")
    fmt = d.get("format")
    if fmt != PROFILE_FORMAT:
        raise ProfileError(f"not an {PROFILE_FORMAT} file (format is {fmt!r})")
    for key in _TOP_KEYS:
        if key not in d:
            raise ProfileError(f"profile is missing key {key!r}")
    units = d["units"]
    if not isinstance(units, dict):
        raise ProfileError("profile 'units' must be an object")
    _layout(units)
    parsed = {}
    for kind, u in units.items():
        if not isinstance(u, dict):
            raise ProfileError(f"units.{kind} must be an object")
        for key in _UNIT_KEYS:
            if key not in u:
                raise ProfileError(f"units.{kind} is missing {key!r}")
        ops_d = u.get("ops", {})
        if not isinstance(ops_d, dict):
            raise ProfileError(f"units.{kind}.ops must be an object")
        ops = []
        for name, o in ops_d.items():
            where = f"units.{kind}.ops.{name}"
            if not isinstance(o, dict):
                raise ProfileError(f"{where} must be an object")
            for key in ("fwd_time", "act_bytes"):
                if key not in o:
                    raise ProfileError(f"{where} is missing {key!r}")
            ops.append((name, OpProfile(_number(f"{where}.fwd_time", o["fwd_time"]),
                                        _number(f"{where}.act_bytes", o["act_bytes"]))))
        vals = {key: _number(f"units.{kind}.{key}", u[key]) for key in _UNIT_KEYS}
        for key in OPTIONAL_UNIT_KEYS:
            if u.get(key) is not None:
                vals[key] = _number(f"units.{kind}.{key}", u[key])
        parsed[kind] = UnitProfile(**vals, ops=tuple(ops))
    top = {key: d[key] for key in _TOP_KEYS if key != "units"}
    for key in ("host_bandwidth", "p2p_bandwidth", "p2p_latency"):
        _number(f"profile {key}", top[key], positive=key != "p2p_latency")
    layer = d.get("layer_recompute_time")
    prof = Profile(**top, units=tuple(parsed.items()),
                   layer_recompute_time=None if layer is None else _number("profile layer_recompute_time", layer))
    check_ops_listed(prof, d.get("offered_ops"))
    return prof


def check_ops_listed(prof: Profile, offered) -> None:
    """Every op of the family's unit kinds is listed, or every op of those the
    profile says it offers (`offered_ops`, written by a `--policy-ops` profile):
    an op left out would vanish from the plan's memory instead of being kept."""
    if offered is not None and (not isinstance(offered, list) or not all(isinstance(o, str) for o in offered)):
        raise ProfileError("profile 'offered_ops' must be a list of op names")
    for kind, unit in prof.units:
        listed = set(unit.op_names)
        missing = [op for op in unit_ops(prof.family, kind) if op not in listed and (offered is None or op in offered)]
        if missing:
            raise ProfileError(f"units.{kind} is missing op {missing[0]!r} of the {prof.family} family (a profile "
                               "lists every op of its unit kinds, or names those it offers in 'offered_ops')")


def load_profile(path) -> Profile:
    return load_document(path, "profile", profile_from_json)


def save_profile(profile: Profile, path) -> None:
    write_json_atomic(path, profile.to_json())


def derive_profile(profile: Profile, num_layers: int, model: str | None = None) -> Profile:
    """The same per-unit costs with another layer count: the paper's 18/23/28B
    models are the 13B shape with more layers, so a measured 13B profile stands in
    for them. `model` names the result; by default the registered model of the
    same shape with that many layers (llama2-13b at 88 layers -> llama2-28b), else
    "<model>@<layers>L"."""
    _integer("num_layers", num_layers)
    return replace(profile, num_layers=num_layers, model=model or _same_shape(profile.model, num_layers))


def _same_shape(model: str, num_layers: int) -> str:
    if model in CONFIGS:
        cfg = CONFIGS[model]
        for name, other in CONFIGS.items():
            if other == cfg.replace(name=name, num_layers=num_layers):
                return name
    return f"{model}@{num_layers}L"
