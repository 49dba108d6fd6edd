#!/usr/bin/env python
"""The schedule comparison grid (schedules.grid): Recomp-K, Strawman-K and Obscura-K
against Recomp-All (DAPPLE+) under f=1, b=2 and recompute r, as a markdown table;
exit 1 if an invariant (obscura <= strawman <= recomp, in-flight) fails.

    python scripts/tables/schedule_grid.py               # the table
    python scripts/tables/schedule_grid.py --random 300  # also: paper's closed-form caps vs the cap search
    python scripts/tables/schedule_grid.py --timing      # also: generate/simulate times at p=8, m=64
"""
import argparse
import sys
import time

from obscura_jax.cli.main import run_command
from schedules.grid import closed_rule_vs_search, markdown, run_grid, timing


def report(args) -> int:
    t0 = time.perf_counter()
    rows = run_grid()
    elapsed = time.perf_counter() - t0
    print(markdown(rows))
    bad = [(g, v) for g in rows for v in g.violations()]
    print(f"\n{len(rows)} grid points, {len(bad)} invariant violations, generated+simulated in {elapsed:.2f} s")
    for g, v in bad:
        print(f"VIOLATION p={g.p} m={g.m} K={g.k} r={g.r:g}: {v}")
    if args.random:
        print(closed_rule_vs_search(args.random))
    if args.timing:
        print(timing())
    return 1 if bad else 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--random", type=int, default=0, metavar="N", help="also compare cap rules on N random cases")
    ap.add_argument("--timing", action="store_true", help="also time generate/simulate at p=8, m=64 (1024 ops)")
    args = ap.parse_args(argv)
    return run_command("schedule_grid", lambda: report(args))


if __name__ == "__main__":
    sys.exit(main())
