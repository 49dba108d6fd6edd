"""The schedule families a plan compares, each planned at its best.

    family          order                                    model stages per device
    1f1b            1F1B (Obscura: the paper's search too)   1
    interleaved-v2  Megatron's interleaved 1F1B, V = 2       2
    interleaved-v4  the same, V = 4                          4
    zb-h1           zero bubble ZB-H1                        1
    zb-h2           zero bubble ZB-H2 (about 2x 1F1B's memory) 1
    zb-auto         the zero-bubble automatic schedule (ZB-1p/2p's heuristic) at the
                    plan's limit: each device's room after its weights, under the
                    chosen sets' costs (planner.family_search)
    zb-v            zero bubble V (ZB-V)                     2
    interleaved-zb  torch's interleaved zero bubble, V = 2   2
    v-half, v-min   controllable-memory V schedules          2

Each is searched the same way (planner.family_search): its own order on the even
partition and, where one device is a little over the limit with nothing recomputed,
on a partition balanced for memory (planner.memory_balance); where a generator of
Obscura's transformation on it exists, that order too, with every
stage's recompute set chosen per op for the limit, swaps on the recomputing
devices, every candidate judged by the simulator and the one memory fold, per
DEVICE (a device's peak: its stages' weights + its held activations and inbox + the
largest rematerialisation working set among its stages). A family whose generator
is not registered is left out; one whose chunks would get less than a layer each
(p * V > L for V > 1) is not offered.

Chunks follow models.even_partition over the 2L+2 units, so they balance to within
a unit even where p * V does not divide L (28B: 88 layers, p = 8).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping

import models
from planner.costs import Partition, check_partition
from planner.family_search import (Candidate, FamilyResult, at_limit, best_of, evaluate, needs_of, order_of,
                                   search_order, transformed, unlimited)
from planner.memory_balance import Balanced, balance_memory, balanced
from planner.profile import Profile
from planner.names import family_of  # noqa: F401 (re-exported)
from planner.search import Evaluation, Setting, rank
from schedules import SCHEDULES, ScheduleError


@dataclass(frozen=True)
class Family:
    name: str                 # as tables and JSON name it
    label: str                # as people read it
    generator: str            # its order (schedules.SCHEDULES)
    virtual_stages: int = 1   # model stages per device
    obscura: str | None = None  # the generator of Obscura's transformation on it
    at_limit: bool = False    # the order itself is made for the limit (the zero-bubble heuristic)
    obscura_base: str | None = None   # the order `obscura` relaxes, where not `generator`'s


FAMILIES = (
    Family("1f1b", "1F1B", "1f1b", 1, "obscura"),
    Family("interleaved-v2", "interleaved V=2", "interleaved", 2, "obscura-interleaved"),
    Family("interleaved-v4", "interleaved V=4", "interleaved", 4, "obscura-interleaved"),
    Family("zb-h1", "ZB-H1", "zb-h1", 1, "obscura-zb-h1", obscura_base="zb-h1-capped"),
    Family("zb-h2", "ZB-H2", "zb-h2", 1),
    Family("zb-auto", "ZB automatic at the limit", "zb-auto", 1, at_limit=True),
    Family("zb-v", "ZB-V", "zb-v", 2),
    Family("interleaved-zb", "interleaved ZB V=2", "interleaved-zb", 2, "obscura-interleaved-zb"),
    Family("v-half", "V-Half", "v-half", 2),
    Family("v-min", "V-Min", "v-min", 2),
)
BY_NAME = {f.name: f for f in FAMILIES}

def offered(profile: Profile, num_devices: int, names=None) -> tuple[Family, ...]:
    """The families planned for `num_devices` devices: registered, every chunk at
    least one layer (a single stage per device: at least one unit), and in `names`
    when given."""
    out = []
    for f in FAMILIES:
        if f.generator not in SCHEDULES or (names is not None and f.name not in names):
            continue
        if f.virtual_stages > 1 and num_devices * f.virtual_stages > profile.num_layers:
            continue
        if num_devices * f.virtual_stages > profile.num_units:
            continue
        out.append(f)
    return tuple(out)


def virtual_options(profile: Profile, num_devices: int) -> tuple[int, ...]:
    """The interleaved chunk counts V offered: every chunk gets at least one layer."""
    return tuple(f.virtual_stages for f in offered(profile, num_devices) if f.generator == "interleaved")


def chunk_partition(profile: Profile, num_devices: int, virtual_stages: int) -> Partition:
    return check_partition(models.even_partition(profile.num_units, num_devices * virtual_stages),
                           profile.num_units)


def search_family(setting: Setting, family: Family, num_devices: int, swap: bool = True,
                  extra: Mapping[str, Evaluation] | None = None, per_op: bool = True) -> FamilyResult:
    """The family at its best under the setting's limit (planner.family_search);
    `extra`: evaluations of the family made elsewhere (Obscura's own search on
    1F1B), compared with the rest; `per_op`: stages choose op sets (off: whole units
    or nothing)."""
    part = chunk_partition(setting.profile, num_devices, family.virtual_stages)
    if family.at_limit:
        found, leans, fast = at_limit(setting, family.generator, num_devices, part, swap, per_op)
        return FamilyResult(family.name, best_of(found), fast, needs_of(leans + [c.evaluation for c in found]),
                            tuple(found))
    order = order_of(setting, family.generator, num_devices, part, family.virtual_stages, per_op)
    fast = unlimited(order)
    found, leans = search_order(order, "plain", swap)
    moved = balanced(order, fast)
    if moved is not None:
        found.append(Candidate("balanced", moved))
    if family.obscura is not None:
        seed = best_of(found) or (Candidate("plain", min(leans, key=lambda ev: max(ev.peaks))) if leans else None)
        more, more_leans = [], []
        if seed is not None:
            try:
                more, more_leans = transformed(setting, family.obscura, family.obscura_base or family.generator,
                                               order, seed.evaluation, swap)
            except ScheduleError:
                pass
        found += more
        leans += more_leans
    for variant, ev in (extra or {}).items():
        found.append(Candidate(variant, ev))
        leans.append(ev)
    return FamilyResult(family.name, best_of(found), fast, needs_of(leans + [c.evaluation for c in found]),
                        tuple(found))


def search_families(setting: Setting, num_devices: int, swap: bool = True, names=None,
                    extra: Mapping[str, Mapping[str, Evaluation]] | None = None,
                    per_op: bool = True) -> dict[str, FamilyResult]:
    """Every offered family at its best, in FAMILIES' order; a family whose
    generator refuses this pipeline (interleaved: m a multiple of p) is recorded
    with the generator's reason and no plan."""
    out = {}
    for f in offered(setting.profile, num_devices, names):
        try:
            out[f.name] = search_family(setting, f, num_devices, swap, (extra or {}).get(f.name), per_op)
        except ScheduleError as e:
            out[f.name] = FamilyResult(f.name, None, None, math.inf, note=str(e))
    return out


def fastest_fitting(results: Mapping[str, FamilyResult]) -> tuple[str, Candidate] | None:
    """(family, candidate) of the fastest fitting plan across families (None: nothing fits)."""
    fitting = [(name, r.best) for name, r in results.items() if r.best is not None]
    return min(fitting, key=lambda t: rank(t[1].evaluation)) if fitting else None


def balanced_partition(profile: Profile, family: Family, num_devices: int, num_microbatches: int,
                       target: float | None = None) -> Balanced:
    """The family's order with nothing recomputed on a partition balanced for memory
    (planner.memory_balance) down to `target`, by default the largest device peak of
    1F1B on the even partition: where the family holds no more than 1F1B, as the
    zero-bubble papers count it (the bench's `zb_v_balanced` run)."""
    if target is None:
        free = Setting(profile, num_microbatches, math.inf)
        target = max(unlimited(order_of(free, "1f1b", num_devices, chunk_partition(profile, num_devices, 1),
                                        1)).peaks)
    setting = Setting(profile, num_microbatches, target)
    order = order_of(setting, family.generator, num_devices, chunk_partition(profile, num_devices,
                                                                          family.virtual_stages),
                     family.virtual_stages)
    even = unlimited(order)
    nothing = (frozenset(),) * len(order.partition)
    return balance_memory(lambda part: evaluate(setting, even.schedule, part, nothing, family.virtual_stages),
                          order.partition, target, even.schedule.stage_to_device)
