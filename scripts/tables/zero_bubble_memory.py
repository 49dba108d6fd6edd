"""Each zero-bubble family's largest device peak against 1F1B's, nothing recomputed,
simulated on a profile: ZB-H1 and ZB-V on the even partition, and ZB-V on the
partition balanced for memory down to 1F1B's peak (planner.families.balanced_partition);
each order as the planner searches it, stage 0's backward joined where its W follows
its I (schedules.generators.join).
The zero-bubble papers state ZB-H1 and ZB-V hold 1F1B's peak; the table shows where
a real model's embedding, head and W blocks put them. Prints markdown for
BENCHMARKS.md ("Zero-bubble memory, simulated").

    python scripts/tables/zero_bubble_memory.py
    python scripts/tables/zero_bubble_memory.py --profile results/h200/profile_gpt3-13b.json --stages 4,8
    python scripts/tables/zero_bubble_memory.py --model llama2-7b --layers 16 --stages 4   # the engine
                               # bench's model, on its analytic H200 profile (bf16, seq 4096)
"""
from __future__ import annotations

import argparse
import math
import sys

import models
from obscura_jax.cli.main import run_command
from obscura_jax.errors import UsageError
from planner.analytic import analytic_profile
from planner.families import BY_NAME, balanced_partition, chunk_partition
from planner.family_search import order_of, unlimited
from planner.profile import derive_profile, load_profile
from planner.search import Setting

GIB = 2 ** 30


def rows(profile, stages, microbatches_per_stage: int) -> list[str]:
    out = ["| p | m | 1F1B | ZB-H1 | ZB-V, even | ZB-V, balanced (its time / 1F1B's) |", "|---|---|---|---|---|---|"]
    for p in stages:
        m = microbatches_per_stage * p
        free = Setting(profile, m, math.inf)
        peak = {}
        for name in ("1f1b", "zb-h1", "zb-v"):
            fam = BY_NAME[name]
            peak[name] = unlimited(order_of(free, fam.generator, p, chunk_partition(profile, p, fam.virtual_stages),
                                            fam.virtual_stages))
        found = balanced_partition(profile, BY_NAME["zb-v"], p, m, max(peak["1f1b"].peaks)).evaluation
        out.append(f"| {p} | {m} | {max(peak['1f1b'].peaks) / GIB:.2f} | {max(peak['zb-h1'].peaks) / GIB:.2f} | "
                   f"{max(peak['zb-v'].peaks) / GIB:.2f} | {max(found.peaks) / GIB:.2f} "
                   f"({found.makespan / peak['1f1b'].makespan:.3f}) |")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default="results/h200/profile_llama2-13b.json")
    ap.add_argument("--model", default=None, help="a registered model on its analytic H200 profile (bf16 compute, "
                                                 "seq 4096, micro-batch 1) instead of --profile")
    ap.add_argument("--layers", type=int, default=None, help="layers (default: the profile's)")
    ap.add_argument("--stages", default="4,8", help="pipeline depths p, comma list")
    ap.add_argument("--per-stage", type=int, default=2, help="micro-batches per stage: m = this x p")
    args = ap.parse_args(argv)
    return run_command("zero_bubble_memory", lambda: report(args))


def report(args) -> int:
    try:
        stages = [int(s) for s in args.stages.split(",")]
    except ValueError:
        raise UsageError(f"--stages must be a comma list of pipeline depths, got {args.stages!r}") from None
    if args.model:
        cfg = models.get_config(args.model, compute_dtype="bfloat16",
                                **({"num_layers": args.layers} if args.layers else {}))
        prof, name = analytic_profile(cfg, 4096, 1, "H200"), f"{args.model} (analytic H200 profile)"
    else:
        prof, name = load_profile(args.profile), args.profile
        prof = derive_profile(prof, num_layers=args.layers) if args.layers else prof
    print(f"{name}, {prof.num_layers} layers: largest device peak in GiB, nothing recomputed")
    print("\n".join(rows(prof, stages, args.per_stage)))
    return 0

if __name__ == "__main__":
    sys.exit(main())
