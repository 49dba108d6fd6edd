#!/usr/bin/env python
"""Regenerate the paper's Fig. 5 table (p=4, m=8): recompute overhead at stage 0 for
Recomp-Non/0/1/All and Strawman-0/1 (plus Obscura-0/1), simulated with f=1, b=2,
r=1, next to the paper's measured figures. Writes CSV, PNG/SVG bars and Gantt charts.

    python scripts/fig05_bubbles.py --out out/fig05
"""
import argparse
import sys

from schedules.paper_figures import fig05


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="out/fig05", help="output folder (default out/fig05)")
    args = ap.parse_args(argv)
    text, files = fig05(args.out)
    print(text)
    for f in files:
        print(f"wrote {f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
