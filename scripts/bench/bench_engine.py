#!/usr/bin/env python
"""Pipeline engine benchmark; writes JSON results to --out (logic: experiments.benchmark).

    python scripts/bench/bench_engine.py --out results/engine_cpu           # CPU: 4 emulated devices
    python scripts/bench/bench_engine.py --out results/engine_cpu --processes 4   # the same on 4 processes
    python scripts/bench/bench_engine.py --gpu --smi --out results/engine_h200    # all 4 stages on one GPU

CPU: measured iteration / simulated-from-measured-costs for 1F1B and Obscura, and the
host dispatch overhead per action. GPU: llama2-7b shapes with 16 layers (~1B params
per stage at p=4), seq 4096, bf16; 1F1B, ZB-H1 (split backward), Obscura with
swapping, Obscura with SO/SI as no-ops; swap GB/s each way, fraction hidden, per-stage peak vs the simulator,
the memory check's predicted device peak beside the measured one (and whether measured <= predicted <= 1.05 x
measured on every run),
measured / one-GPU serial simulation and host dispatch per action for each run;
--smi logs nvidia-smi clocks/power/throttle reasons beside the runs.
"""
import argparse
import sys
from pathlib import Path

from experiments import benchmark
from obscura_jax.cli.main import run_command


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="folder for the JSON results")
    ap.add_argument("--gpu", action="store_true", help="GPU mode (see above)")
    ap.add_argument("--steps", type=int, default=None, help="steps per run (CPU 20, GPU 6)")
    ap.add_argument("--microbatches", type=int, default=8)
    ap.add_argument("--seq-len", type=int, default=None, help="CPU 64, GPU 4096 (--cpu-smoke 64)")
    ap.add_argument("--micro-batch-size", type=int, default=4, help="CPU only (GPU uses 1)")
    ap.add_argument("--devices", type=int, default=4, help="CPU only: emulated devices")
    ap.add_argument("--processes", type=int, default=1, help="CPU only: local processes sharing the devices")
    ap.add_argument("--layers", type=int, default=16, help="GPU only: llama2-7b layers (16 = ~1B/stage)")
    ap.add_argument("--mechanisms", default="device_put", help="GPU only: swap mechanisms, comma list")
    ap.add_argument("--timeout", type=float, default=240, help="GPU only: seconds per run")
    ap.add_argument("--smi", action="store_true", help="GPU only: log nvidia-smi clocks and power beside the runs")
    ap.add_argument("--cpu-smoke", action="store_true",
                    help="GPU mode's runs on llama2-tiny and one CPU device (checks the plumbing without a GPU)")
    ap.add_argument("--runs", default=None, help="GPU only: comma list of runs to do (default all)")
    args = ap.parse_args(argv)
    return run_command("bench_engine", lambda: bench(args))


def bench(args) -> int:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.gpu:
        # the CPU smoke runs llama2-tiny, whose sequences stop at 256 tokens
        seq_len = args.seq_len or (64 if args.cpu_smoke else 4096)
        benchmark.gpu_bench(out, args.layers, seq_len, args.microbatches, args.steps or 6,
                            args.mechanisms.split(","), args.timeout,
                            args.runs.split(",") if args.runs else None, smi_log=args.smi,
                            cpu_smoke=args.cpu_smoke)
    else:
        benchmark.cpu_bench(out, args.steps or 20, args.seq_len or 64, args.micro_batch_size,
                            args.microbatches, args.devices, args.processes)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
