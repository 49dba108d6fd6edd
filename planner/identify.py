"""Pipeline transformation, step 1: which stages must recompute (spec sections 3, 7).

A stage whose 1F1B memory W_s + (p - s) a_s exceeds the limit G is *adjusted*.
With CMB-Identifying (on by default) a stage first tries the cheap `cmb` set
(norms, activation, mul): if 1F1B fits with it, the stage keeps the 1F1B order and
only recomputes CMB, and is not adjusted. Adjusted stages form a prefix 0..k (an
early stage holds more micro-batches than any later one), so every stage up to
the last one that does not fit is adjusted.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

from planner.costs import kept_bytes, weight_bytes, working_bytes
from planner.errors import PlanError
from planner.memory_model import warmup_1f1b
from planner.profile import Profile
from planner.residuals import UnitKept

_UNITS = {"": 1, "b": 1, "kb": 10 ** 3, "mb": 10 ** 6, "gb": 10 ** 9, "tb": 10 ** 12,
          "kib": 2 ** 10, "mib": 2 ** 20, "gib": 2 ** 30, "tib": 2 ** 40}
_SIZE_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([a-zA-Z]*)\s*$")


def parse_memory_limit(value) -> int:
    """Bytes from an int/float or a string like '85899345920', '80GiB', '85.9GB',
    '512MiB' (decimal kB/MB/GB/TB, binary KiB/MiB/GiB/TiB). Rounds down."""
    if isinstance(value, bool):
        raise PlanError(f"memory limit must be a size, got {value!r}")
    if isinstance(value, (int, float)):
        num, unit = float(value), ""
    else:
        m = _SIZE_RE.match(str(value))
        if not m or m.group(2).lower() not in _UNITS:
            raise PlanError(f"memory limit {value!r} is not a size (give bytes, or e.g. 80GiB, 85.9GB)")
        num, unit = float(m.group(1)), m.group(2).lower()
    limit = int(num * _UNITS[unit])
    if not num > 0 or limit < 1:
        raise PlanError(f"memory limit must be > 0 bytes, got {value!r}")
    return limit


def format_bytes(n: float) -> str:
    """'80.00 GiB'-style text for people."""
    for unit, size in (("TiB", 2 ** 40), ("GiB", 2 ** 30), ("MiB", 2 ** 20), ("KiB", 2 ** 10)):
        if abs(n) >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n:.0f} B"


def stage_peak_1f1b(profile: Profile, units: tuple[int, int], stage: int, num_stages: int,
                    num_microbatches: int, recompute: frozenset[str],
                    unit_kept: UnitKept | None = None) -> float:
    """W_s + (p - s) kept_s(R) + the rematerialisation working set of R + one
    received activation and one received gradient waiting in the stage's inbox."""
    a, b = units
    kinds = profile.kinds
    inbox = ((profile.unit(kinds[a]).input_bytes if a > 0 else 0.0)
             + (profile.unit(kinds[b]).input_bytes if b < profile.num_units else 0.0))
    return (weight_bytes(profile, units) + inbox
            + warmup_1f1b(num_stages, num_microbatches, stage)
            * kept_bytes(profile, units, recompute, unit_kept)
            + working_bytes(profile, units, recompute))


@dataclass(frozen=True)
class Identification:
    last_adjusted: int                        # k; -1 when 1F1B fits everywhere
    recompute: tuple[frozenset[str], ...]     # per stage: () or CMB after k; () on 0..k

    @property
    def adjusted(self) -> tuple[int, ...]:
        return tuple(range(self.last_adjusted + 1))

    @property
    def cmb_stages(self) -> tuple[int, ...]:
        return tuple(s for s, r in enumerate(self.recompute) if r and s > self.last_adjusted)


def cmb_set(profile: Profile) -> frozenset[str]:
    from models.ops import preset_ops
    present = set(profile.op_names)
    return frozenset(o for o in preset_ops("cmb", profile.family) if o in present)


def non_adjusted_set(profile: Profile, units: tuple[int, int], stage: int, num_stages: int,
                     num_microbatches: int, memory_limit: float, cmb: bool,
                     unit_kept: UnitKept | None = None) -> frozenset[str] | None:
    """What a stage keeping the 1F1B order recomputes to fit (nothing, or the CMB
    set when `cmb`), or None if it cannot fit without being adjusted."""
    args = (profile, units, stage, num_stages, num_microbatches)
    if stage_peak_1f1b(*args, frozenset(), unit_kept) <= memory_limit:
        return frozenset()
    if cmb:
        ops = cmb_set(profile)
        if ops and stage_peak_1f1b(*args, ops, unit_kept) <= memory_limit:
            return ops
    return None


def identify(profile: Profile, partition: Sequence[tuple[int, int]], num_microbatches: int,
             memory_limit: float, cmb: bool = True, unit_kept: UnitKept | None = None
             ) -> Identification:
    p = len(partition)
    sets = [non_adjusted_set(profile, units, s, p, num_microbatches, memory_limit, cmb, unit_kept)
            for s, units in enumerate(partition)]
    k = max((s for s in range(p) if sets[s] is None), default=-1)
    return Identification(k, tuple(frozenset() if s <= k else sets[s] for s in range(p)))
