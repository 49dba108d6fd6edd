#!/usr/bin/env python
"""Schedule zoo (BENCHMARKS.md "Schedule zoo"): today's schedules at unit costs, and Obscura on
interleaved 1F1B and ZB-H1 against the same base with Recomp-K (schedules/zoo_grid.py).

    python scripts/tables/zoo_grid.py            # both markdown tables; exit 1 if an invariant fails
    python scripts/tables/zoo_grid.py --quick    # p=4 only

Simulated time units, not measurements.
"""
import argparse
import sys
import time

from schedules import zoo_grid as Z


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="p=4 only")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    print("Unit costs, p=4, m=8 (a device's work per micro-batch f=1, I=W=1; 1 byte per micro-batch):\n")
    print(Z.unit_markdown(Z.unit_rows()))
    rows = Z.zoo_rows(ps=(4,) if args.quick else Z.ZOO_P)
    print("\nObscura on interleaved (V=2) and ZB-H1 vs the same base with Recomp-K "
          "(f=1, b=2, recompute r per device):\n")
    print(Z.zoo_markdown(rows))
    bad = [(g, v) for g in rows for v in g.violations()]
    print(f"\n{len(rows)} grid points, {len(bad)} invariant violations, {time.perf_counter() - t0:.1f} s")
    for g, v in bad:
        print(f"VIOLATION {g.base} p={g.p} m={g.m} K={g.k} r={g.r:g}: {v}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
