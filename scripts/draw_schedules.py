#!/usr/bin/env python
"""Draw Gantt charts in the style of the paper's Figs. 2 (bubbles of 1F1B and
on-demand recompute), 4 (strawman), 6 (dependency relaxation) and 9 (swapping),
all simulated for p=4, m=8. PNG and SVG each.

    python scripts/draw_schedules.py --out out/schedules
"""
import argparse
import sys

from schedules.paper_figures import schedule_figures


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="out/schedules", help="output folder (default out/schedules)")
    args = ap.parse_args(argv)
    for f in schedule_figures(args.out):
        print(f"wrote {f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
