"""Write tests/schedules/goldens/obscura.json: the Obscura generators' outputs over
the grid of tests/schedules/obscura_goldens.py (digests of rows and simulated
timeline, exact makespan), which test_obscura_goldens.py and
scripts/bench/bench_schedule_speed.py hold later code to.

    .venv/bin/python scripts/goldens/make_obscura_goldens.py            # the grid and LARGE (minutes)
    .venv/bin/python scripts/goldens/make_obscura_goldens.py --check    # compare instead of writing

Run it only where the output is meant to change, and say why in the commit.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.schedules.obscura_goldens import CASES, LARGE, PATH, key, load, render  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="compare with the file instead of writing it")
    args = ap.parse_args()
    out = {}
    for case in CASES + LARGE:
        out[key(case)] = render(case)
        print(key(case), out[key(case)].get("makespan", "error"), flush=True)
    if args.check:
        bad = [k for k, v in load().items() if out.get(k) != v]
        print(f"{len(out) - len(bad)} of {len(out)} identical" + (f"; differ: {', '.join(bad)}" if bad else ""))
        return 1 if bad else 0
    PATH.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
    print(f"wrote {len(out)} cases to {PATH.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
