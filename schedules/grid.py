"""The schedule comparison grid: Recomp-K, Strawman-K and Obscura-K against
Recomp-All (DAPPLE+) under f=1, b=2 and recompute r, with the invariants

    obscura makespan <= strawman makespan <= recomp makespan (same K),
    obscura peak in-flight <= strawman peak in-flight on every stage.

    python scripts/tables/schedule_grid.py              # print the markdown table, exit 1 if an invariant fails
    python scripts/tables/schedule_grid.py --random 300 # also: paper's closed-form caps vs the cap search
    python scripts/tables/schedule_grid.py --timing     # also: generate/simulate times at p=8, m=64

Pure Python; the figures are simulated time units, not measurements.
"""
from __future__ import annotations

import random
import time
from dataclasses import dataclass

from schedules.costs import StageCosts
from schedules.generators import generate
from schedules.generators.common import one_f_one_b_row, resolve_adjusted
from schedules.generators.relax import relaxed_rows
from schedules.generators.strawman import strawman_warmup
from schedules.simulator import simulate

GRID_P = (4, 8)
GRID_M = (8, 16, 32, 64)
GRID_R = (1.0, 0.4)
_TOL = 1e-9


def grid_ks(p: int) -> tuple[int, ...]:
    return tuple(sorted({0, 1, 2, p // 2}))


@dataclass(frozen=True)
class GridRow:
    p: int
    m: int
    k: int
    r: float
    plain: float          # 1F1B without recompute (the memory-unlimited ceiling)
    recomp_all: float
    recomp: float
    strawman: float
    obscura: float
    inflight_strawman: tuple[int, ...]
    inflight_obscura: tuple[int, ...]

    def violations(self) -> list[str]:
        out = []
        if self.obscura > self.strawman * (1 + _TOL):
            out.append(f"obscura {self.obscura:g} > strawman {self.strawman:g}")
        if self.strawman > self.recomp * (1 + _TOL):
            out.append(f"strawman {self.strawman:g} > recomp {self.recomp:g}")
        for s, (a, b) in enumerate(zip(self.inflight_obscura, self.inflight_strawman)):
            if a > b:
                out.append(f"stage {s}: obscura holds {a} micro-batches, strawman {b}")
        return out


def grid_row(p: int, m: int, k: int, r: float) -> GridRow:
    costs = StageCosts.uniform(p, fwd=1.0, bwd=2.0, recompute=r)
    plain = simulate(generate("1f1b", p, m), costs)
    rall = simulate(generate("recomp", p, m, adjusted="all"), costs)
    rk = simulate(generate("recomp", p, m, adjusted=k), costs)
    st = simulate(generate("strawman", p, m, adjusted=k), costs)
    ob = simulate(generate("obscura", p, m, adjusted=k, costs=costs), costs)
    return GridRow(p, m, k, r, plain.makespan, rall.makespan, rk.makespan, st.makespan, ob.makespan,
                   tuple(x.peak_inflight_microbatches for x in st.stages),
                   tuple(x.peak_inflight_microbatches for x in ob.stages))


def run_grid() -> list[GridRow]:
    return [grid_row(p, m, k, r) for p in GRID_P for m in GRID_M for k in grid_ks(p) for r in GRID_R]


def markdown(rows: list[GridRow]) -> str:
    head = ("| p | m | K | r | 1F1B (no rc) | Recomp-All | Recomp-K | Strawman-K | Obscura-K "
            "| speedup Recomp-K | speedup Strawman-K | speedup Obscura-K | in-flight 0..K strawman -> obscura | ok |\n"
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    lines = [head]
    for g in rows:
        sp = lambda t: f"{g.recomp_all / t:.3f}x"  # noqa: E731
        inflight = (" ".join(map(str, g.inflight_strawman[:g.k + 1])) + " -> "
                    + " ".join(map(str, g.inflight_obscura[:g.k + 1])))
        lines.append(f"| {g.p} | {g.m} | {g.k} | {g.r:g} | {g.plain:.4g} | {g.recomp_all:.4g} | {g.recomp:.4g} "
                     f"| {g.strawman:.4g} | {g.obscura:.4g} | {sp(g.recomp)} | {sp(g.strawman)} | {sp(g.obscura)} "
                     f"| {inflight} | {'yes' if not g.violations() else 'NO'} |")
    return "\n".join(lines)


def closed_rule_vs_search(n: int, seed: int = 0) -> dict[str, int]:
    """On random heterogeneous costs, count instances where the paper's closed-form
    caps (c_s = c_k + (k-s), c_k = the strawman's 3(p-k-1)+1) give a longer makespan
    than the strawman, and where the generator's cap search does."""
    rng = random.Random(seed)
    worse_rule = worse_search = 0
    for _ in range(n):
        p = rng.choice([2, 3, 4, 6, 8])
        m = rng.choice([1, 2, 4, 8, 12, 16, 32])
        k = rng.randrange(p)
        f = [rng.uniform(0.5, 1.5) for _ in range(p)]
        costs = StageCosts(fwd=tuple(f), bwd=tuple(x * 2 * rng.uniform(0.8, 1.2) for x in f),
                           recompute=tuple(x * rng.uniform(0.2, 1.0) for x in f),
                           p2p_latency=rng.choice([0.0, 0.0, 0.1, 0.3]))
        adj = resolve_adjusted(k, p)
        t_straw = simulate(generate("strawman", p, m, adjusted=k), costs).makespan
        straw = strawman_warmup(p, m, adj)
        fixed = {s: one_f_one_b_row(s, m, min(p - s, m)) for s in range(p) if s not in adj}
        caps = {s: min(m, straw[k] + (k - s)) for s in adj}
        _, t_rule = relaxed_rows(p, m, fixed, caps, costs, adj)
        t_search = simulate(generate("obscura", p, m, adjusted=k, costs=costs), costs).makespan
        worse_rule += t_rule > t_straw * (1 + _TOL)
        worse_search += t_search > t_straw * (1 + _TOL)
    return {"instances": n, "closed_rule_slower_than_strawman": worse_rule,
            "search_slower_than_strawman": worse_search}


def timing(repeat: int = 5) -> dict[str, float]:
    """Milliseconds (best of `repeat`) to generate and to simulate p=8, m=64, K=4."""
    costs = StageCosts.uniform(8, 1.0, 2.0, 1.0)
    out = {}
    for name in ("1f1b", "strawman", "obscura"):
        best_gen = best_sim = float("inf")
        for _ in range(repeat):
            t0 = time.perf_counter()
            sched = generate(name, 8, 64, adjusted=None if name == "1f1b" else 4, costs=costs)
            t1 = time.perf_counter()
            simulate(sched, costs)
            t2 = time.perf_counter()
            best_gen, best_sim = min(best_gen, t1 - t0), min(best_sim, t2 - t1)
        out[f"generate {name} ms"] = round(1e3 * best_gen, 1)
        out[f"simulate {name} ms"] = round(1e3 * best_sim, 1)
    return out
