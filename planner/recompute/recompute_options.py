"""What one stage may recompute, as a short list of efficient choices.

A stage recomputes one set R of op names (or a preset: `full`, `layer`) in every
unit it holds. For each unit kind, every subset of the ops whose output the forward
would keep is priced as the recompute IP prices it (planner.recompute.recompute_ip): per unit

    kept(R) = base + sum of the bytes each op not in R frees alone
    time(R) = min(sum of the times of the ops in R, the unit's full recompute)
    work(R) = bytes the unit rematerialises at once (its recomputed outputs)

and only the subsets no other beats on all three are kept (a Pareto front). A
stage's choices combine its kinds' fronts (op names are per kind, so a stage's set
is the union), summed over its units (`work` is the largest single unit's: the
backward rematerialises one unit at a time, planner.costs.working_bytes), plus the
presets, then pruned again. The fronts are small (Llama-2: 5 ops per kind that
keep bytes, so 32 subsets, a dozen or so efficient), so a device's choice among
them can be exact (planner.device_choice).

The bytes are the IP's linear model (planner.recompute.residuals.marginal_op_bytes when the
profile's model is traceable, else the profile's additive bytes); the simulation of
the chosen sets uses the exact figure (planner.costs.kept_bytes), and the search
tightens a device whose exact peak exceeds the limit (planner.family_search).
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from functools import lru_cache

from planner.costs import kept_bytes, recompute_time, working_bytes
from planner.profile import FULL, LAYER, Profile
from planner.recompute.residuals import marginal_op_bytes

MAX_KIND_OPS = 14   # beyond this a kind's subsets are not enumerated: only its presets are offered


@dataclass(frozen=True)
class Option:
    """One recompute choice for one stage, priced per micro-batch."""
    recompute: frozenset[str]
    time: float      # seconds its backward spends recomputing
    kept: float      # bytes one micro-batch keeps on the stage (the IP's linear model)
    work: float      # bytes the backward rematerialises at once on top


@dataclass(frozen=True)
class _KindChoice:
    ops: frozenset[str]
    time: float
    kept: float
    work: float


def pareto(items, key=lambda o: (o.time, o.kept, o.work)):
    """The items no other item beats or equals on every coordinate of `key`
    (smaller is better), in ascending key order; of equal keys the first stays."""
    out: list = []
    for item in sorted(items, key=key):
        k = key(item)
        if not any(all(a <= b for a, b in zip(key(o), k)) for o in out):
            out.append(item)
    return out


@lru_cache(maxsize=256)
def _kind_front(profile: Profile, kind: str, traced: bool) -> tuple[_KindChoice, ...]:
    unit = profile.unit(kind)
    marginal = marginal_op_bytes(profile) if traced else None
    if marginal is not None:
        base, freed = marginal[kind]
    else:
        base, freed = unit.input_bytes, {n: o.act_bytes for n, o in unit.ops}
    ops = [n for n in unit.op_names if freed.get(n, 0.0) > 0 or unit.op(n).act_bytes > 0]
    if len(ops) > MAX_KIND_OPS:
        ops = []
    choices = []
    for r in range(len(ops) + 1):
        for subset in itertools.combinations(ops, r):
            s = frozenset(subset)
            kept = base + sum(b for n, b in freed.items() if n not in s)
            choices.append(_KindChoice(s, unit.recompute_time(s), kept, unit.recomputed_bytes(s)))
    return tuple(pareto(choices))


@lru_cache(maxsize=4096)
def stage_options(profile: Profile, units: tuple[int, int], traced: bool = True,
                  presets: bool = True) -> tuple[Option, ...]:
    """The efficient recompute choices of a stage over `units` (a half-open unit
    range), fastest first: nothing recomputed is always the first. `traced`: price
    bytes by the traced marginal model where the profile allows it. `presets`:
    offer `full` and `layer` beside the op sets."""
    kinds = profile.kinds[units[0]:units[1]]
    counts = {k: kinds.count(k) for k in dict.fromkeys(kinds)}
    fronts = [_kind_front(profile, k, traced) for k in counts]
    names = [set().union(*(c.ops for c in f)) for f in fronts]
    disjoint = all(not (a & b) for a, b in itertools.combinations(names, 2))
    options = []
    if disjoint:
        for combo in itertools.product(*fronts):
            options.append(Option(frozenset().union(*(c.ops for c in combo)),
                                  sum(counts[k] * c.time for k, c in zip(counts, combo)),
                                  sum(counts[k] * c.kept for k, c in zip(counts, combo)),
                                  max((c.work for c in combo), default=0.0)))
    else:   # a vocabulary shared between kinds: one set for the stage, priced whole
        for combo in {c.ops for f in fronts for c in f}:
            options.append(_priced(profile, units, combo))
    if presets:
        options += [_priced(profile, units, frozenset({FULL}))]
        if tuple(profile.layer_kinds) == ("attn", "mlp"):   # one checkpoint over a layer's two units
            options.append(_priced(profile, units, frozenset({LAYER})))
    if not any(not o.recompute for o in options):
        options.append(_priced(profile, units, frozenset()))
    return tuple(pareto(options))


def _priced(profile: Profile, units: tuple[int, int], recompute: frozenset[str]) -> Option:
    """An option priced by planner.costs (the additive bytes; the presets' own rules)."""
    return Option(recompute, recompute_time(profile, units, recompute), kept_bytes(profile, units, recompute),
                  working_bytes(profile, units, recompute))
