#!/usr/bin/env python
"""Measured pipelines on N GPUs: plan here, run on the GPU machine, report (logic:
experiments/multi_gpu_bench.py, experiments/multi_gpu_report.py; docs/multiprocess.md
"Multi-GPU session").

    python scripts/bench/bench_multi_gpu.py plan --gpus 4 --out results/h200x4     # CPU, needs OR-Tools
    python scripts/bench/bench_multi_gpu.py run --gpus 4 --out $OUT/h200x4 --plans results/h200x4/plans
    python scripts/bench/bench_multi_gpu.py report --out results/h200x4             # again after merging calls
    python scripts/bench/bench_multi_gpu.py all --cpu-smoke --out /tmp/smoke        # every step on CPU

plan: an analytic H200 profile of llama2-7b shapes with 4 layers a stage (seq 4096,
micro-batch 1), F/B scaled to the one-GPU run of that shape (results/h200/engine_v2),
one Obscura plan per m = 2p, 4p for a limit that forces recompute on the early stages
-> <out>/plans/. run: per m, 1F1B, DAPPLE+ (Recomp-All) and the plan, each with one
process per GPU and with one process for all GPUs, then a swap pair (stages 0..p-2
swapping at once, and the same with SO/SI as no-ops): runs/<label>.json,
gantt/<label>.png, status_<UTC time>.json. report: bench_multi_gpu.json and table.md (for BENCHMARKS.md).
"""
import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

from experiments import multi_gpu_bench as mgb
from obscura_jax.cli.main import run_command
from obscura_jax.errors import UsageError
from experiments.multi_gpu_report import report
from schedules.formats.jsonio import write_json_atomic


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("step", choices=("plan", "run", "report", "all"), help="what to do (all: plan, run, report)")
    ap.add_argument("--out", required=True, help="results folder (results/h200x<N>/ layout)")
    ap.add_argument("--gpus", type=int, default=4, help="GPUs = pipeline stages p")
    ap.add_argument("--factors", default="2,4", help="micro-batches m = factor x p, comma list")
    ap.add_argument("--processes", type=int, default=None,
                    help="processes of the multi-process layout (default: one per GPU; --cpu-smoke: 2)")
    ap.add_argument("--memory-limit", default=None,
                    help="plan: per-GPU limit (e.g. 20GiB); default: halfway between the 1F1B peaks of "
                         "stages p/2-1 and p/2, so the early stages must recompute")
    ap.add_argument("--families", action="store_true",
                    help="plan: let the planner run Obscura on other schedule families (interleaved, ZB-H1); "
                         "default: Obscura on 1F1B, as the paper compares it with DAPPLE+")
    ap.add_argument("--reference", default=mgb.ONE_GPU_REFERENCE,
                    help="one-GPU bench_engine.py results of the same shape: plan scales F/B to them, "
                         "report shows their swap figures; 'none' for neither")
    ap.add_argument("--plans", default=None, help="run: folder of the plan step's output (default <out>/plans)")
    ap.add_argument("--steps", type=int, default=None, help="steps per run (GPU 5, smoke 3)")
    ap.add_argument("--runs", default=None, help="run: comma list of run labels (default all)")
    ap.add_argument("--timeout", type=float, default=300, help="run: seconds per run")
    ap.add_argument("--deadline", type=float, default=None,
                    help="run: seconds for all runs; a run that would end later is skipped")
    ap.add_argument("--cpu-smoke", action="store_true",
                    help="llama2-tiny on 4 emulated CPU devices, seq 32, 2 local processes (the plumbing, no GPU)")
    args = ap.parse_args(argv)
    return run_command("bench_multi_gpu", lambda: bench(args))


def shape_of(args) -> mgb.BenchShape:
    try:
        factors = tuple(int(f) for f in args.factors.split(","))
    except ValueError:
        raise UsageError(f"--factors must be a comma list of integers, got {args.factors!r}") from None
    if args.cpu_smoke:
        shape = mgb.smoke_shape(args.processes or 2, factors)
    else:
        shape = mgb.BenchShape(stages=args.gpus, factors=factors, processes=args.processes)
    return shape if args.steps is None else replace(shape, steps=args.steps)


def bench(args) -> int:
    shape = shape_of(args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    reference = None if args.reference == "none" or args.cpu_smoke else Path(args.reference)
    if args.step in ("plan", "all"):
        mgb.make_plans(shape, out, args.memory_limit, reference, args.families)
    if args.step in ("run", "all"):
        plans = Path(args.plans) if args.plans else out / "plans"
        if not (plans / "plans.json").exists():
            raise UsageError(f"no plans in {plans}: run the plan step first (see --help)")
        if plans.resolve() != (out / "plans").resolve():
            mgb.copy_plans(plans, out / "plans")
        status = mgb.run_all(mgb.run_configs(shape, out / "plans"), out, args.timeout, args.deadline,
                             args.runs.split(",") if args.runs else None)
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())   # one file per call: merged folders keep all
        write_json_atomic(out / f"status_{stamp}.json", status)
        for label, line in status.items():
            print(f"{label:24s} {line}")
    if args.step in ("run", "report", "all"):
        summary = report(out, reference)
        print((out / "table.md").read_text())
        print(f"wrote {out}/bench_multi_gpu.json, {out}/table.md ({len(summary['runs'])} runs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
