#!/usr/bin/env python
"""Fit the simulator's realism terms (obscura-calibration/1, schedules.calibration)
on one-GPU engine runs: `scripts/bench/bench_engine.py --gpu` writes one obscura-train/1
JSON per run (gpu_<run>.json); each run's schedule is simulated on one device with
the costs measured standalone in the same run, and the launch overhead per action
and the optimizer step per weight byte are fitted to the measured iterations.

    python scripts/device/fit_calibration.py --runs results/h200/engine_v2 --out results/h200/calibration.json

Prints every run's measured / ideal simulation / calibrated simulation.
"""
import argparse
import json
import sys
from pathlib import Path

from obscura_jax.cli.main import run_command
from obscura_jax.errors import UsageError
from schedules.calibration import fit, sample_from_run, save_calibration


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=Path, required=True, help="folder with bench_engine's gpu_<run>.json files")
    ap.add_argument("--out", type=Path, required=True, help="calibration JSON to write")
    ap.add_argument("--link-sharing", type=float, default=0.0,
                    help="share of a p2p link a swapping neighbour takes: assumed, one GPU cannot show it "
                         "(default 0: NVLink p2p and PCIe host copies use different links)")
    args = ap.parse_args(argv)

    def body() -> int:
        paths = sorted(args.runs.glob("gpu_*.json"))
        if not paths:
            raise UsageError(f"no gpu_*.json runs in {args.runs}")
        samples = [sample_from_run(p.stem[len("gpu_"):], json.loads(p.read_text())) for p in paths]
        cal = fit(samples, args.link_sharing, source=f"{args.runs}: {', '.join(s.label for s in samples)}")
        save_calibration(cal, args.out)
        print(cal.describe())
        print(f"{'run':26} {'measured s':>11} {'ideal sim s':>12} {'calibrated s':>13} {'measured/cal':>13}")
        for r in cal.fit:
            print(f"{r['run']:26} {r['measured_s']:11.4f} {r['ideal_s']:12.4f} {r['calibrated_s']:13.4f} "
                  f"{r['measured_over_calibrated']:13.3f}")
        print(f"wrote {args.out}")
        return 0

    return run_command("fit_calibration", body)


if __name__ == "__main__":
    sys.exit(main())
