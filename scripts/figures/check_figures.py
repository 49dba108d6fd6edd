#!/usr/bin/env python
"""Recompute every committed figure CSV from its script and compare byte-for-byte,
so no committed figure (or a doc number read from one) can drift from the code.

    python scripts/figures/check_figures.py            # every CSV in full (minutes; --jobs planning processes)
    python scripts/figures/check_figures.py --fast     # a small case of each (seconds; `make test` runs it)
    python scripts/figures/check_figures.py --regenerate   # rewrite every committed figure (CSV + PNG) in place

Full: each script runs with the arguments that made the committed CSV and its CSV
must equal the committed one. Fast: each runs one small case (`FAST`), and every row
it writes must appear, byte-identical and under the same header, in the committed
CSV. Run from anywhere; the scripts run from the repository root (profiles and
labels are relative to it). Exit 1 and a line per differing CSV when any differs.
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FIGURES = "results/figures"

# (committed CSV, script, the arguments that made it (without --out), a fast case's arguments)
CHECKS = (
    (f"{FIGURES}/fig05_bubbles.csv", "fig05_bubbles", [], []),
    (f"{FIGURES}/fig12_throughput.csv", "fig12_throughput", [],
     ["--families", "llama2", "--sizes", "18b", "--batches", "16", "--h200-limit", "none"]),
    (f"{FIGURES}/fig13_memory.csv", "fig13_memory", [], ["--families", "llama2"]),
    (f"{FIGURES}/fig14_stage_time.csv", "fig14_stage_time", [], ["--families", "llama2"]),
    (f"{FIGURES}/fig16_ablation.csv", "fig16_ablation", [], ["--sizes", "23b", "--batches", "16"]),
    (f"{FIGURES}/analytic_h200/fig12_throughput.csv", "fig12_throughput", ["--analytic", "H200"],
     ["--analytic", "H200", "--families", "gpt3", "--sizes", "18b", "--batches", "16", "--h200-limit", "none"]),
    (f"{FIGURES}/analytic_h200/fig16_ablation.csv", "fig16_ablation", ["--analytic", "H200"],
     ["--analytic", "H200", "--sizes", "23b", "--batches", "16"]),
    (f"{FIGURES}/analytic_a100/fig12_throughput.csv", "fig12_throughput",
     ["--analytic", "A100-80GB", "--h200-limit", "none"],
     ["--analytic", "A100-80GB", "--h200-limit", "none", "--families", "llama2", "--sizes", "18b", "--batches", "16"]),
    (f"{FIGURES}/fig_zoo.csv", "fig_zoo", [], ["--families", "llama2", "--batches", "16"]),
)


def _run(script: str, args: list[str], out: Path) -> Path:
    """Run scripts/figures/<script>.py's main with `args` and --out `out` from the root."""
    folder = str(Path(__file__).resolve().parent)      # the figure scripts sit beside this one
    if folder not in sys.path:
        sys.path.insert(0, folder)
    module = importlib.import_module(script)
    here = os.getcwd()
    os.chdir(ROOT)
    try:
        rc = module.main([*args, "--out", str(out)])
    finally:
        os.chdir(here)
    if rc != 0:
        raise RuntimeError(f"{script} {' '.join(args)} exited {rc}")
    return out / f"{script}.csv"


def compare(committed: Path, fresh: Path, subset: bool) -> str | None:
    """None when `fresh` matches `committed` (equal, or with `subset`: same header,
    every row present); else one line saying what differs."""
    want = committed.read_text().splitlines()
    got = fresh.read_text().splitlines()
    if not want or not got or want[0] != got[0]:
        return f"{committed.relative_to(ROOT)}: header differs"
    if subset:
        missing = [line for line in got[1:] if line not in set(want[1:])]
        return f"{committed.relative_to(ROOT)}: {len(missing)} of {len(got) - 1} recomputed rows differ, " \
               f"e.g. {missing[0][:160]}" if missing else None
    if want != got:
        diff = sum(a != b for a, b in zip(want, got)) + abs(len(want) - len(got))
        return f"{committed.relative_to(ROOT)}: {diff} of {len(want)} lines differ"
    return None


def regenerate(only: str | None = None, jobs: int | None = None, log=print) -> None:
    """Rerun every script with the committed arguments into the committed folder."""
    for csv, script, args, _ in CHECKS:
        if only and only not in csv:
            continue
        run_args = list(args) + (["--jobs", str(jobs)] if jobs is not None and script != "fig05_bubbles" else [])
        _run(script, run_args, ROOT / Path(csv).parent)
        log(f"regenerated {csv}")


def check(fast: bool, only: str | None = None, jobs: int | None = None, log=print) -> list[str]:
    """Problems found (empty: every checked CSV regenerates)."""
    problems = []
    with tempfile.TemporaryDirectory() as tmp:
        for i, (csv, script, args, fast_args) in enumerate(CHECKS):
            if only and only not in csv:
                continue
            run_args = list(fast_args if fast else args)
            if jobs is not None and script != "fig05_bubbles":
                run_args += ["--jobs", str(jobs)]
            fresh = _run(script, run_args, Path(tmp) / str(i))
            problem = compare(ROOT / csv, fresh, subset=fast)
            log(f"{'DIFFERS' if problem else 'ok':7} {csv}" + (f"  ({problem})" if problem else ""))
            if problem:
                problems.append(problem)
    return problems


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fast", action="store_true", help="one small case per CSV, compared row by row")
    ap.add_argument("--only", default=None, help="check only CSVs whose path contains this")
    ap.add_argument("--jobs", type=int, default=None, help="planning processes per script (default: the script's)")
    ap.add_argument("--regenerate", action="store_true", help="rewrite the committed figures instead of checking")
    args = ap.parse_args(argv)
    if args.regenerate:
        regenerate(args.only, args.jobs)
        return 0
    problems = check(args.fast, args.only, args.jobs)
    print(f"{len(problems)} CSV(s) differ" if problems else "every checked CSV regenerates byte-identically")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
