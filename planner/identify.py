"""Pipeline transformation, step 1: which stages must recompute (docs/obscura.md).

A stage whose 1F1B memory W_s + (p - s) a_s exceeds the limit G is *adjusted*.
With CMB-Identifying (on by default) a stage first tries the cheap `cmb` set
(norms, activation, mul): if 1F1B fits with it, the stage keeps the 1F1B order and
only recomputes CMB, and is not adjusted. Adjusted stages form a prefix 0..k (an
early stage holds more micro-batches than any later one), so every stage up to
the last one that does not fit is adjusted.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from models.registry import get_family
from planner.costs import kept_bytes, weight_bytes, working_bytes
from planner.errors import PlanError
from planner.profile import Profile
from planner.recompute.residuals import UnitKept
from schedules.sizes import parse_bytes


def warmup_1f1b(p: int, m: int, s: int) -> int:
    """Micro-batches stage s holds at most in 1F1B (DAPPLE): p - s (the paper's
    Step 1 rule; the one memory fold counts the same over a 1F1B order)."""
    return min(p - s, m)


def parse_memory_limit(value) -> int:
    """Bytes from an int/float or a string like '85899345920', '80GiB', '85.9GB',
    '512MiB' (schedules.sizes.parse_bytes). Rounds down."""
    limit = int(parse_bytes(value, "memory limit", error=PlanError))
    if limit < 1:
        raise PlanError(f"memory limit must be > 0 bytes, got {value!r}")
    return limit


def stage_peak_1f1b(profile: Profile, units: tuple[int, int], stage: int, num_stages: int,
                    num_microbatches: int, recompute: frozenset[str],
                    unit_kept: UnitKept | None = None) -> float:
    """W_s + (p - s) kept_s(R) + the rematerialisation working set of R + the
    inbox: one received activation when the stage has a steady phase (p - s < m: its
    next input arrives as a forward starts; with no steady phase nothing waits then)
    and the received gradients, two when m > 1: B reads its gradient to its end, and
    the next one can arrive meanwhile (whether it does depends on the durations: the
    next stage's backward after a forward shorter than this B); plus the input
    gradient a backward writes beside its residuals (planner.costs.program_outputs).
    In closed form, what the one memory fold (schedules.memory) gives the stage on a
    simulated 1F1B order, or one gradient more where the second does not arrive in
    time (tests/planner/test_memory_figures.py), and what the planner's peaks add."""
    a, b = units
    kinds = profile.kinds
    warm = warmup_1f1b(num_stages, num_microbatches, stage)
    grads = min(2, num_microbatches) if b < profile.num_units else 0
    inbox = ((profile.unit(kinds[a]).input_bytes if a > 0 and warm < num_microbatches else 0.0)
             + grads * (profile.unit(kinds[b]).input_bytes if b < profile.num_units else 0.0))
    dx = profile.unit(kinds[a]).input_bytes if a > 0 else 0.0
    return (weight_bytes(profile, units) + inbox + dx
            + warm * kept_bytes(profile, units, recompute, unit_kept)
            + working_bytes(profile, units, recompute))


@dataclass(frozen=True)
class Identification:
    last_adjusted: int                        # k; -1 when 1F1B fits everywhere
    recompute: tuple[frozenset[str], ...]     # per stage: () or CMB after k; () on 0..k

    @property
    def adjusted(self) -> tuple[int, ...]:
        return tuple(range(self.last_adjusted + 1))


def cmb_set(profile: Profile) -> frozenset[str]:
    """The family's `cmb` preset (empty when its family registers none) among the
    profile's ops."""
    family = get_family(profile.family)
    present = set(profile.op_names)
    cmb = family.preset("cmb") if "cmb" in family.preset_names else frozenset()
    return frozenset(o for o in cmb if o in present)


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
