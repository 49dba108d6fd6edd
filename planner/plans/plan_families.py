"""What a plan says of every schedule family (the plan file's `families` list).

For each family of planner.families: whether it was evaluated (and why not), its
fastest plan that fits the limit (iteration time, each device's peak, what each
stage recomputes and swaps, and which variant of the search found it), or, when none
fits, the bytes it needs at least; and its fastest plan with no limit (nothing
recomputed: its time and the peak it would need). docs/formats.md, "Plan JSON".
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from planner.errors import PlanError


@dataclass(frozen=True)
class StageChoiceSummary:
    recompute: tuple[str, ...]
    swap_blocks: int = 0
    swap_fraction: float = 0.0
    units: tuple[int, int] | None = None    # its unit range [a, b) (None: written before it was recorded)


@dataclass(frozen=True)
class FamilySummary:
    name: str
    label: str
    virtual_stages: int
    evaluated: bool
    note: str = ""                              # why not evaluated
    fits: bool = False
    variant: str | None = None                  # plain, plain+swap, obscura, ... (planner.family_search)
    iteration_time: float | None = None         # of the fastest fitting plan
    peak_bytes: tuple[int, ...] = ()            # per device, of that plan
    stages: tuple[StageChoiceSummary, ...] = ()
    needs_bytes: int | None = None              # when nothing fits: the least peak any candidate needs
    unlimited_time: float | None = None         # nothing recomputed, no limit
    unlimited_peak_bytes: int | None = None

    def __post_init__(self) -> None:
        for name in ("iteration_time", "unlimited_time"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v)
                                  or v < 0):
                raise PlanError(f"family {self.name!r}: {name} must be a number >= 0 or null, got {v!r}")
        if self.fits and self.iteration_time is None:
            raise PlanError(f"family {self.name!r} fits but gives no iteration_time")

    def to_json(self) -> dict:
        out: dict[str, Any] = {"name": self.name, "label": self.label, "virtual_stages": self.virtual_stages,
                               "evaluated": self.evaluated}
        if not self.evaluated:
            return {**out, "note": self.note}
        out.update(fits=self.fits, variant=self.variant, iteration_time=self.iteration_time,
                   peak_bytes=list(self.peak_bytes),
                   stages=[{**({"units": list(c.units)} if c.units is not None else {}),
                            "recompute": list(c.recompute), "swap_blocks": c.swap_blocks,
                            "swap_fraction": c.swap_fraction} for c in self.stages],
                   needs_bytes=self.needs_bytes, unlimited_time=self.unlimited_time,
                   unlimited_peak_bytes=self.unlimited_peak_bytes)
        return out


def family_from_json(d: Any) -> FamilySummary:
    if not isinstance(d, dict) or not isinstance(d.get("name"), str):
        raise PlanError("plan 'families' entries must be objects with a 'name'")
    try:
        stages = tuple(StageChoiceSummary(tuple(c["recompute"]), int(c.get("swap_blocks", 0)),
                                          float(c.get("swap_fraction", 0.0)),
                                          tuple(int(u) for u in c["units"]) if "units" in c else None)
                       for c in d.get("stages", []))
        return FamilySummary(d["name"], str(d.get("label", d["name"])), int(d.get("virtual_stages", 1)),
                             bool(d.get("evaluated", False)), str(d.get("note", "")), bool(d.get("fits", False)),
                             d.get("variant"), d.get("iteration_time"), tuple(int(b) for b in d.get("peak_bytes", [])),
                             stages, d.get("needs_bytes"), d.get("unlimited_time"), d.get("unlimited_peak_bytes"))
    except (KeyError, TypeError, ValueError) as e:
        raise PlanError(f"plan family {d.get('name')!r} is malformed: {e}") from None


def summarize(families, results, op_order, timing=None) -> tuple[FamilySummary, ...]:
    """FamilySummary of every family in `families` (planner.families.Family), from
    `results` (name -> planner.family_search.FamilyResult; a family without one was
    not offered). `timing(evaluation)`: its iteration time (default its makespan;
    on a stage mesh, with the data all-reduce: planner.mesh_plan)."""
    timing = timing or (lambda ev: ev.makespan)
    from planner.search import recompute_names  # lazy: the plan file reads summaries without the search

    out = []
    for f in families:
        r = results.get(f.name)
        if r is None:
            out.append(FamilySummary(f.name, f.label, f.virtual_stages, False,
                                     note="not offered: a chunk would hold less than one layer, or its "
                                          "generator is not registered"))
            continue
        if r.unlimited is None:
            out.append(FamilySummary(f.name, f.label, f.virtual_stages, False, note=r.note))
            continue
        fast = r.unlimited
        common = dict(unlimited_time=timing(fast), unlimited_peak_bytes=int(math.ceil(max(fast.peaks))))
        if r.best is None:
            out.append(FamilySummary(f.name, f.label, f.virtual_stages, True, needs_bytes=int(math.ceil(r.needs))
                                     if math.isfinite(r.needs) else None, **common))
            continue
        ev = r.best.evaluation
        cfg = ev.config
        stages = tuple(StageChoiceSummary(recompute_names(cfg.recompute[s], op_order), cfg.swap_blocks[s],
                                          cfg.beta if cfg.swap_blocks[s] else 0.0, tuple(cfg.partition[s]))
                       for s in range(len(cfg.recompute)))
        out.append(FamilySummary(f.name, f.label, f.virtual_stages, True, fits=True, variant=r.best.variant,
                                 iteration_time=timing(ev), peak_bytes=tuple(int(math.ceil(p)) for p in ev.peaks),
                                 stages=stages, **common))
    return tuple(out)
