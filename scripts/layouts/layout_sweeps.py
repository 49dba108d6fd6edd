#!/usr/bin/env python
"""The layout sweeps docs/reproduction.md ("Layout sweep") compares with the
layouts paper: `obscura sweep` on 64 GPUs for llama2-13b and llama-30b at 2k and 8k,
each with analytic layer costs and with the H200-measured ones, written as CSVs
under results/sweeps/ (`<model>_<seq>_<costs>.csv`), from which
scripts/docs/reproduction_tables.py renders the table and scripts/docs/doc_values.py the
figures the page quotes.

    python scripts/layouts/layout_sweeps.py [--out results/sweeps]     # ~1 min on 2 cores
    python scripts/layouts/layout_sweeps.py --cases llama2-13b_8k_measured --out /tmp/x   # one of them

tests/tooling/test_layout_sweeps.py reruns one and compares it with the committed CSV.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from obscura_jax.cli.main import main as obscura

ROOT = Path(__file__).resolve().parents[2]
MODELS = ("llama2-13b", "llama-30b")
SEQS = (2048, 8192)
COSTS = {"analytic": ["--measured", "none"], "measured": []}   # measured: results/h200/sweep_layers.json


def csv_name(model: str, seq: int, costs: str) -> str:
    return f"{model}_{seq // 1024}k_{costs}.csv"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "results/sweeps"), help="folder for the CSVs")
    ap.add_argument("--cases", default=None, help="comma list of CSV stems to run (default: all eight)")
    args = ap.parse_args(argv)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    wanted = set(args.cases.split(",")) if args.cases else None
    for model in MODELS:
        for seq in SEQS:
            for costs, flags in COSTS.items():
                if wanted is not None and csv_name(model, seq, costs)[:-4] not in wanted:
                    continue
                rc = obscura(["sweep", "--model", model, "--seq-len", str(seq), "--gpus", "64", "--top", "0",
                              *flags, "--csv", str(Path(args.out) / csv_name(model, seq, costs))])
                if rc:
                    return rc
    return 0


if __name__ == "__main__":
    sys.exit(main())
