"""CPU seconds of the Obscura generator, alone and as `obscura simulate` runs it.

    python scripts/bench/bench_schedule_speed.py [--stages 16 32 64] [--root DIR] [--check] [--random-costs 1 2]

For each p (m = 8p, every stage adjusted, uniform costs f=1, b=2, r=1): the whole
command `obscura simulate --schedule obscura --stages p --microbatches 8p` (start-up,
generation, validation, simulation, the table), then `generate("obscura", p, 8p)`
alone, each in a fresh process, CPU seconds (user + system) from the OS, since the
machine may be shared. `--root DIR` times another checkout's code (e.g. `git
worktree add` or `git archive` of an older commit) with this environment: before
and after figures in one session. `--check` also holds the output to the goldens
(tests/schedules/goldens/obscura.json) where they have the size (p = 32, 64);
`--random-costs SEED...` also times the generator alone on random heterogeneous
stage costs, where a smaller cap changes more of the pipeline (slower trials).
"""
from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

GENERATE = """
import random, sys, time
from schedules import StageCosts, generate
p, seed = int(sys.argv[1]), int(sys.argv[2])
costs = None
if seed:     # heterogeneous stages, as schedules/grid.py's random cases
    rng = random.Random(seed)
    f = [rng.uniform(0.5, 1.5) for _ in range(p)]
    costs = StageCosts(fwd=tuple(f), bwd=tuple(x * 2 * rng.uniform(0.8, 1.2) for x in f),
                       recompute=tuple(x * rng.uniform(0.2, 1.0) for x in f), p2p_latency=rng.choice([0.0, 0.1, 0.3]))
t = time.process_time()
generate("obscura", p, 8 * p, costs=costs)
print(time.process_time() - t)
"""

CHECK = """
import importlib.util, sys
spec = importlib.util.spec_from_file_location("goldens", sys.argv[2])   # this checkout's, on the timed code
g = importlib.util.module_from_spec(spec)
spec.loader.exec_module(g)
case = next((c for c in g.LARGE if c["p"] == int(sys.argv[1]) and c["costs"] == "default"), None)
print("no golden" if case is None else "identical to golden" if g.render(case) == g.load()[g.key(case)] else "DIFFERS")
"""


def _child_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run(argv: list[str], root: Path) -> tuple[float, str]:
    """CPU seconds of a fresh Python running `argv` on `root`'s code, and its output."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    c0 = _child_cpu()
    out = subprocess.run([sys.executable, *argv], cwd=root, env=env, capture_output=True, text=True, check=True)
    return _child_cpu() - c0, out.stdout.strip()


def body() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--stages", type=int, nargs="+", default=[16, 32, 64])
    ap.add_argument("--root", type=Path, default=ROOT, help="the checkout whose code to time (default: this one)")
    ap.add_argument("--check", action="store_true", help="also compare with the goldens (p = 32, 64)")
    ap.add_argument("--random-costs", type=int, nargs="*", default=[], metavar="SEED",
                    help="also time the generator alone on random heterogeneous stage costs (these seeds)")
    args = ap.parse_args()
    root = args.root.resolve()
    print(f"code: {root}; machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}; "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}", flush=True)
    for p in args.stages:
        cli, _ = run(["-m", "obscura_jax", "simulate", "--schedule", "obscura", "--stages", str(p),
                      "--microbatches", str(8 * p)], root)
        _, gen = run(["-c", GENERATE, str(p), "0"], root)
        line = f"p={p} m={8 * p}: simulate {cli:.1f} s CPU, generator alone {float(gen):.1f} s CPU"
        for seed in args.random_costs:
            line += f", on random costs (seed {seed}) {float(run(['-c', GENERATE, str(p), str(seed)], root)[1]):.1f} s"
        if args.check:
            line += "; " + run(["-c", CHECK, str(p), str(ROOT / "tests/schedules/obscura_goldens.py")], root)[1]
        print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(body())
