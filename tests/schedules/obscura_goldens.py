"""Frozen outputs of the Obscura generators (obscura, and obscura-* on today's
schedules) over a grid of sizes, adjusted sets, costs and swap settings: the
schedule (its rows, stage settings, validated), its makespan and the simulated
Timeline (every statistic, every op's times) under the case's costs, each kept as
a SHA-256 of its canonical text. The cap search behind these generators may get
faster, never different: tests/schedules/generators/test_obscura_goldens.py holds
today's code to the file this module writes (scripts/goldens/make_obscura_goldens.py).

Costs per case: the generator's default (uniform f=1, b=2, r=1), uniform with the
realism terms, random heterogeneous stages (the cap search's motivating kind),
random with transfer sizes and overheads, small integers (many ties), and some
zero durations. LARGE cases are the benchmark's sizes (scripts/bench/bench_schedule_speed.py).
"""
from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path

from schedules import StageCosts, generate, simulate
from schedules.errors import ScheduleError
from schedules.generators import model_stages

PATH = Path(__file__).parent / "goldens" / "obscura.json"

COSTS = ("default", "uniform", "random", "random_bytes", "integer", "zeros")


def case_costs(kind: str, n: int, seed: int) -> StageCosts | None:
    """Costs of `kind` for n model stages (None: the generator's default)."""
    rng = random.Random(f"{kind}:{n}:{seed}")
    if kind == "default":
        return None
    if kind == "uniform":
        return StageCosts.uniform(n, 1.0, 2.0, 1.0, action_overhead=0.3, link_sharing=0.25, act_bytes=4.0,
                                  boundary_bytes=1.0, p2p_bandwidth=10.0, host_bandwidth=8.0)
    if kind == "integer":
        f = [rng.choice([1, 2]) for _ in range(n)]
        return StageCosts(fwd=tuple(f), bwd=tuple(x * rng.choice([2, 3]) for x in f),
                          recompute=tuple(rng.choice([0, 1, 2]) for _ in range(n)), p2p_latency=rng.choice([0, 1]))
    if kind == "zeros":
        return StageCosts(fwd=tuple(rng.choice([0.0, 1.0, 0.5]) for _ in range(n)),
                          bwd=tuple(rng.choice([0.0, 2.0, 1.5]) for _ in range(n)),
                          recompute=tuple(rng.choice([0.0, 1.0]) for _ in range(n)))
    f = [rng.uniform(0.5, 1.5) for _ in range(n)]
    extra = {}
    if kind == "random_bytes":
        extra = dict(act_bytes=tuple(rng.uniform(1, 4) for _ in range(n)), host_bandwidth=rng.choice([2.0, 8.0]),
                     boundary_bytes=tuple(rng.choice([0.0, 0.5, 2.0]) for _ in range(n)),
                     p2p_bandwidth=rng.choice([4.0, 20.0]), action_overhead=rng.choice([0.0, 0.05, 0.3]),
                     link_sharing=rng.choice([0.0, 0.25, 0.5]))
    return StageCosts(fwd=tuple(f), bwd=tuple(x * 2 * rng.uniform(0.8, 1.2) for x in f),
                      recompute=tuple(x * rng.uniform(0.2, 1.0) for x in f),
                      p2p_latency=rng.choice([0.0, 0.0, 0.1, 0.3]), **extra)


def _case(name, p, m, adjusted="all", costs="default", seed=0, swap=(0, 0.0), **extra) -> dict:
    return dict(name=name, p=p, m=m, adjusted=adjusted, costs=costs, seed=seed, swap_blocks=swap[0],
                swap_fraction=swap[1], extra=extra)


def key(case: dict) -> str:
    adj = case["adjusted"]
    adj = "-".join(map(str, adj)) if isinstance(adj, tuple) else str(adj)
    extra = "".join(f"_{k}{'-'.join(map(str, v)) if isinstance(v, tuple) else v}"
                    for k, v in sorted(case["extra"].items()))
    return (f"{case['name']}_p{case['p']}_m{case['m']}_adj{adj}_{case['costs']}{case['seed']}"
            f"_swap{case['swap_blocks']}x{case['swap_fraction']:g}{extra}")


def _grid() -> list[dict]:
    out = []
    sizes = [(1, 3), (2, 1), (2, 4), (3, 5), (4, 8), (4, 16), (5, 3), (6, 12), (8, 8), (8, 21), (8, 64), (12, 48)]
    for i, (p, m) in enumerate(sizes):
        for adj in ("all", 0, p // 2, (1, 3) if p > 3 else "all"):
            for costs in COSTS:
                if (i + len(str(adj)) + COSTS.index(costs)) % 3 == 0 or costs in ("default", "random"):
                    out.append(_case("obscura", p, m, adj, costs, seed=i))
    for p, m in ((4, 8), (6, 24), (8, 32)):
        for costs in ("default", "uniform", "random_bytes"):
            out.append(_case("obscura", p, m, p // 2, costs, swap=(1, 0.5)))
            out.append(_case("obscura", p, m, p // 2 - 1, costs, swap=(2, 1.0)))
    out.append(_case("obscura", 4, 8, "all", "random", warmup=(6, 5, 3, 1)))
    for p, m in ((16, 128), (16, 40)):
        out += [_case("obscura", p, m, "all", "default"), _case("obscura", p, m, 10, "random", seed=p + m),
                _case("obscura", p, m, "all", "integer", seed=m)]
    for name, v in (("obscura-zb-h1", None), ("obscura-interleaved", 2), ("obscura-interleaved-zb", 2)):
        for p, m in ((2, 4), (4, 8), (4, 16), (8, 32)):
            for costs in ("default", "random", "integer"):
                for migrate in (False, True):
                    kw = {"virtual_stages": v} if v else {}
                    out.append(_case(name, p, m, "all", costs, seed=p * m, migrate=migrate, **kw))
        for adj in ("all", 1):
            out.append(_case(name, 4, 8, adj, "random_bytes", swap=(1, 0.5), **({"virtual_stages": v} if v else {})))
    return list({key(c): c for c in out}.values())


CASES = _grid()
LARGE = [_case("obscura", 32, 256), _case("obscura", 32, 256, 20, "random", seed=1), _case("obscura", 64, 512)]


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def render(case: dict) -> dict:
    """The case's schedule, makespan and simulated timeline (each device's ops with
    their times and its memory curve: not the report's statistics, whose definitions
    may change), as digests (and the makespan as its exact repr)."""
    extra = dict(case["extra"])
    n = model_stages(case["name"], case["p"], extra.get("virtual_stages"))
    costs = case_costs(case["costs"], n, case["seed"])
    try:
        sched = generate(case["name"], case["p"], case["m"], adjusted=case["adjusted"], costs=costs,
                         swap_blocks=case["swap_blocks"], swap_fraction=case["swap_fraction"], **extra)
    except ScheduleError as e:    # refusing a case is an output too
        return {"error": str(e)}
    rows = "\n".join(" ".join(a.long for a in row) for row in sched.rows)
    stages = repr([(spec.recompute, spec.swap_fraction, spec.swap_blocks) for spec in sched.stages])
    tl = simulate(sched, costs if costs is not None else StageCosts.uniform(n, 1.0, 2.0, 1.0))
    return {"rows": _sha(rows + "\n" + stages + "\n" + repr(sched.stage_to_device)), "makespan": repr(tl.makespan),
            "timeline": _sha(json.dumps([{k: st[k] for k in ("ops", "memory")} for st in tl.to_json()["stages"]],
                                        sort_keys=True))}


def load() -> dict[str, dict]:
    return json.loads(PATH.read_text())
