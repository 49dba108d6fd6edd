"""Today's schedules beside Obscura: the figures behind BENCHMARKS.md "Schedule zoo".

Two tables, both simulated (time units, not measurements):

`unit_rows`: p = 4, m = 8, a device's work per micro-batch f = 1, b = 2 (a split
backward: I = W = 1); chunks split a device's share evenly (interleaved, V = 2:
f = 0.5, b = 1 per chunk; zb-v: f = I = W = 0.5 per chunk); activations 1 byte per
micro-batch per device (0.5 per chunk). Makespan, peak blocks held per device
(stage, micro-batch: forwarded and not yet freed by W or B) and peak bytes.

`zoo_rows`: Obscura on interleaved 1F1B (V = 2) and on ZB-H1 (capped) against the same base
with Recomp-K, for p in ZOO_P, m in ZOO_M, K in ZOO_K, recompute r in ZOO_R (r per
device; per chunk r/V), with the invariants

    obscura makespan <= Recomp-K makespan,
    obscura holds no more micro-batches than Recomp-K on any device,

and, beside them, Obscura with migration (migrate=True: more micro-batches held on
the adjusted devices, each cheaper) and the base without recompute (the memory-
unlimited ceiling).
"""
from __future__ import annotations

from dataclasses import dataclass

from schedules.costs import StageCosts
from schedules.generators import generate, model_stages
from schedules.simulator import simulate

ZOO_P = (4, 8)
ZOO_M = (8, 16, 32)
ZOO_K = (0, 1, 2)
ZOO_R = (0.4, 1.0)
ZOO_BASES = ("interleaved", "zb-h1-capped")
OBSCURA_ON = {"interleaved": "obscura-interleaved", "zb-h1-capped": "obscura-zb-h1",
              "interleaved-zb": "obscura-interleaved-zb"}     # obscura-zb-h1 sits on the capped ZB-H1
UNIT_SCHEDULES = ("1f1b", "zb-h1", "zb-h1-capped", "zb-v", "interleaved", "interleaved-zb")
_TOL = 1e-9


def device_costs(name: str, p: int, r: float, act_bytes: float = 0.0) -> StageCosts:
    """f = 1, b = 2 (I = W = 1), recompute r and `act_bytes` per device and
    micro-batch, split evenly over the chunks a device runs."""
    n = model_stages(name, p)
    v = n // p
    return StageCosts.uniform(n, 1.0 / v, 2.0 / v, r / v, act_bytes=act_bytes / v)


@dataclass(frozen=True)
class UnitRow:
    schedule: str
    makespan: float
    inflight: tuple[int, ...]          # peak blocks held per device
    peak_bytes: tuple[float, ...]      # peak activation bytes per device (1 per micro-batch per device)


def unit_rows(p: int = 4, m: int = 8) -> list[UnitRow]:
    out = []
    for name in UNIT_SCHEDULES:
        costs = device_costs(name, p, 0.0, act_bytes=1.0)
        tl = simulate(generate(name, p, m, costs=costs), costs)
        out.append(UnitRow(name, tl.makespan, tuple(st.peak_inflight_microbatches for st in tl.stages),
                           tuple(st.peak_activation_bytes for st in tl.stages)))
    return out


@dataclass(frozen=True)
class ZooRow:
    base: str
    p: int
    m: int
    k: int
    r: float
    plain: float                   # the base without recompute
    recomp_all: float
    recomp: float                  # the base with Recomp-K
    obscura: float
    migrate: float                 # obscura with migrate=True
    inflight_recomp: tuple[int, ...]
    inflight_obscura: tuple[int, ...]
    inflight_migrate: tuple[int, ...]

    def violations(self) -> list[str]:
        out = []
        if self.obscura > self.recomp * (1 + _TOL):
            out.append(f"obscura {self.obscura:g} > Recomp-K {self.recomp:g}")
        for d, (a, b) in enumerate(zip(self.inflight_obscura, self.inflight_recomp)):
            if a > b:
                out.append(f"device {d}: obscura holds {a} micro-batches, Recomp-K {b}")
        return out


def zoo_row(base: str, p: int, m: int, k: int, r: float) -> ZooRow:
    costs = device_costs(base, p, r)
    held = lambda tl: tuple(st.peak_inflight_microbatches for st in tl.stages)  # noqa: E731
    plain = simulate(generate(base, p, m), costs)
    rall = simulate(generate(base, p, m, adjusted="all"), costs)
    rk = simulate(generate(base, p, m, adjusted=k), costs)
    ob = simulate(generate(OBSCURA_ON[base], p, m, adjusted=k, costs=costs), costs)
    mig = simulate(generate(OBSCURA_ON[base], p, m, adjusted=k, costs=costs, migrate=True), costs)
    return ZooRow(base, p, m, k, r, plain.makespan, rall.makespan, rk.makespan, ob.makespan, mig.makespan,
                  held(rk), held(ob), held(mig))


def zoo_rows(bases=ZOO_BASES, ps=ZOO_P, ms=ZOO_M, ks=ZOO_K, rs=ZOO_R) -> list[ZooRow]:
    return [zoo_row(b, p, m, k, r) for b in bases for p in ps for m in ms for k in ks for r in rs]


def unit_markdown(rows: list[UnitRow]) -> str:
    lines = ["| schedule | makespan | peak blocks held per device | peak activation bytes per device |",
             "|---|---|---|---|"]
    for u in rows:
        lines.append(f"| {u.schedule} | {u.makespan:g} | {' '.join(map(str, u.inflight))} "
                     f"| {' '.join(f'{b:g}' for b in u.peak_bytes)} |")
    return "\n".join(lines)


def zoo_markdown(rows: list[ZooRow]) -> str:
    lines = ["| base | p | m | K | r | no recompute | Recomp-All | Recomp-K | Obscura-K | speedup | "
             "Obscura-K + migration | speedup | held 0..K: Recomp-K -> Obscura -> +migration | ok |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for g in rows:
        n = g.k + 1
        held = " -> ".join(" ".join(map(str, h[:n])) for h in (g.inflight_recomp, g.inflight_obscura,
                                                                 g.inflight_migrate))
        lines.append(f"| {g.base} | {g.p} | {g.m} | {g.k} | {g.r:g} | {g.plain:.4g} | {g.recomp_all:.4g} "
                     f"| {g.recomp:.4g} | {g.obscura:.4g} | {g.recomp / g.obscura:.3f}x | {g.migrate:.4g} "
                     f"| {g.recomp / g.migrate:.3f}x | {held} | {'yes' if not g.violations() else 'NO'} |")
    return "\n".join(lines)
