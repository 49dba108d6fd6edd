"""Measure per-layer costs for `obscura sweep` on the current JAX device (the H200:
the lead commits the output as results/h200/sweep_layers.json, which the sweep then
uses by default). One layer (attention + MLP unit, the project's own stage code) of
the 13B and 30B shapes at seq 2048/8192, micro-batch 1/2/4, attention xla/cudnn,
policies none/selective/mlp/cmb/full; pruned by priority to fit --budget-s (see
obscura_jax/profiling/layer_bench.py). --tiny runs a tiny config on CPU in seconds.

    python scripts/layouts/sweep_layer_bench.py --out results/h200/sweep_layers.json
    python scripts/layouts/sweep_layer_bench.py --tiny --out /tmp/tiny_layers.json
"""
from __future__ import annotations

import argparse
import datetime
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))   # runnable without installing

import models  # noqa: E402  (after the path insert)
from obscura_jax.cli.main import run_command  # noqa: E402
from planner.layouts.measured import BENCH_REVISION, FORMAT  # noqa: E402
from schedules.formats.jsonio import write_json_atomic  # noqa: E402


def _csv(cast):
    return lambda text: tuple(cast(v) for v in text.split(",") if v.strip())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="JSON file to write (obscura-sweep-layers/1)")
    ap.add_argument("--tiny", action="store_true", help="llama2-tiny, short sequences: CPU, seconds")
    ap.add_argument("--models", type=_csv(str), default=None, help="default llama2-13b,llama-30b")
    ap.add_argument("--seq-lens", type=_csv(int), default=None, help="default 2048,8192")
    ap.add_argument("--micro-batches", type=_csv(int), default=None, help="default 1,2,4")
    ap.add_argument("--attentions", type=_csv(str), default=("cudnn", "xla"))
    ap.add_argument("--policies", type=_csv(str), default=("none", "selective", "mlp", "cmb", "full"))
    ap.add_argument("--budget-s", type=float, default=None,
                    help="start no measurement that would end after this many seconds (default "
                         "210: with JAX start-up the script ends within 4 minutes; tiny 60)")
    ap.add_argument("--full-grid", action="store_true",
                    help="also measure every policy at micro-batch > 1 (otherwise derived)")
    args = ap.parse_args(argv)

    return run_command("sweep_layer_bench", lambda: bench(args, argv))


def bench(args, argv) -> int:
    """Measure the planned tasks within the budget, saving the file after each."""
    t_start = time.perf_counter()
    import jax  # lazy (these three): JAX starts only once the flags are read, inside the timing
    import jax.numpy as jnp
    from obscura_jax.profiling.layer_bench import matmul_tflops, plan_tasks, run_bench

    tiny = args.tiny
    names = args.models or (("llama2-tiny",) if tiny else ("llama2-13b", "llama-30b"))
    seqs = args.seq_lens or ((32, 64) if tiny else (2048, 8192))
    batches = args.micro_batches or ((1, 2) if tiny else (1, 2, 4))
    budget = args.budget_s if args.budget_s is not None else (60.0 if tiny else 210.0)
    configs = {n: models.get_config(n).replace(num_layers=1, max_seq_len=max(
        max(seqs), models.get_config(n).max_seq_len)) for n in names}
    tasks = plan_tasks(names, seqs, batches, args.attentions, args.policies, args.full_grid)
    dev = jax.devices()[0]
    compute = jnp.dtype(next(iter(configs.values())).compute_dtype)
    rate = matmul_tflops(256 if dev.platform == "cpu" else 8192, compute)
    print(f"{dev.device_kind} ({dev.platform}), jax {jax.__version__}: {len(tasks)} tasks, "
          f"budget {budget:.0f} s; {compute} matmul {rate:.1f} TFLOP/s", flush=True)
    meta = {"format": FORMAT, "bench_revision": BENCH_REVISION, "device": dev.device_kind,
            "platform": dev.platform,
            "jax_version": jax.__version__,
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "command": " ".join(["python", "scripts/layouts/sweep_layer_bench.py"] + (argv or sys.argv[1:])),
            "compute_dtype": str(compute), "matmul_tflops": rate,
            "matmul_size": 256 if dev.platform == "cpu" else 8192, "budget_s": budget,
            "what": "one attention+MLP layer, models.build_stage units [1,3) of a 1-layer config; "
                    "times in seconds per micro-batch, bytes per micro-batch"}

    def save(entries):
        write_json_atomic(args.out, {**meta, "wall_s": time.perf_counter() - t_start,
                                     "entries": entries})

    entries = run_bench(configs, tasks, budget, log=lambda s: print(s, flush=True), on_entry=save)
    save(entries)
    counts = {}
    for e in entries:
        counts[e["status"]] = counts.get(e["status"], 0) + 1
    print(f"wrote {args.out}: {counts}, {time.perf_counter() - t_start:.0f} s in all", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
