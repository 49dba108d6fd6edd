"""The planner on Llama-2 28B (p = 8, seq 4096, micro-batch 1, 80 GiB), m in {16, 32, 64}:
the plan, simulated speedups over DAPPLE+ next to the paper's, the ablation, and
how long planning takes. Prints markdown for BENCHMARKS.md ("Planner").

    python scripts/tables/plan_28b.py                         # analytic A100-80GB-like profile
    python scripts/tables/plan_28b.py --profile results/h200/llama2-13b.json   # a measured 13B
                                                              # profile, stretched to 88 layers
"""
from __future__ import annotations

import argparse
import datetime
import platform
import sys
import time

import models
from obscura_jax.cli.main import run_command
from obscura_jax.cli.commands.plan import render
from planner.analytic import analytic_profile
from experiments.paper import PAPER_SPEEDUP
from planner.plan import plan_search
from planner.profile import derive_profile, load_profile

ABLATION = (("relaxation only", dict(cmb=False, swap=False, partition=False, ip=False)),
            ("+ swapping-aware recompute", dict(cmb=False, swap=True, partition=False, ip=True)),
            ("+ partition adjustment", dict(cmb=False, swap=True, partition=True, ip=True)),
            ("+ CMB-Identifying (full planner)", dict(cmb=True, swap=True, partition=True, ip=True)))
_LOW, _HIGH = PAPER_SPEEDUP[("llama2", "28b")]
PAPER = f"+{100 * (_LOW - 1):.0f}-{100 * (_HIGH - 1):.0f}% (Llama-2 28B, 8x A100-80GB, Fig. 12)"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", help="obscura-profile/1 to use (default: analytic llama2-28b)")
    ap.add_argument("--device", default="A100-80GB", help="device of the analytic profile")
    ap.add_argument("--layers", type=int, default=88, help="layers to plan for (28B = 88)")
    ap.add_argument("--limit", default="80GiB")
    ap.add_argument("--microbatches", default="16,32,64")
    args = ap.parse_args(argv)
    return run_command("plan_28b", lambda: report(args))


def report(args) -> int:
    """The markdown: plans and baselines per m, the ablation, each plan's table.
    Long: one report, printed in the order it reads."""
    if args.profile:
        prof = derive_profile(load_profile(args.profile), args.layers)
    else:
        prof = analytic_profile(models.get_config("llama2-28b"), 4096, 1, args.device)
    ms = [int(x) for x in args.microbatches.split(",")]
    print(f"# planner on {prof.model} ({prof.num_layers} layers), profile device `{prof.device}`")
    print(f"\nmachine: {platform.node()} ({platform.processor() or platform.machine()}), "
          f"date {datetime.date.today()}, p=8, limit {args.limit}\n")
    print("| m | obscura (s) | DAPPLE | DAPPLE+ | Recomp-N | OHP-CMB | Strawman | speedup vs DAPPLE+ | "
          "paper | plan source | planning time |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    results = {}
    for m in ms:
        t0 = time.perf_counter()
        res = plan_search(prof, 8, m, args.limit)
        took = time.perf_counter() - t0
        results[m] = res
        base = dict(res.plan.baselines)
        cell = lambda name: (f"{base[name]:.3f}" if base[name] is not None  # noqa: E731
                             else f"OOM ({res.baselines[name].peaks and max(res.baselines[name].peaks) / 2**30:.1f} GiB;"
                                  f" {res.baselines[name].makespan:.3f} s if it fit)")
        t = res.plan.predicted_iteration_time
        print(f"| {m} | {t:.3f} | {cell('dapple')} | {cell('dapple_plus')} | {cell('recomp')} | "
              f"{cell('ohp_cmb')} | {cell('strawman')} | {base['dapple_plus'] / t:.3f}x "
              f"(+{100 * (base['dapple_plus'] / t - 1):.1f}%) | {PAPER} | {res.source} | {took:.2f} s |")
    print("\n## ablation (speedup over DAPPLE+, simulated; the search's own configuration)\n")
    print("| step | " + " | ".join(f"m={m}" for m in ms) + " |")
    print("|---|" + "---|" * len(ms))
    for label, flags in ABLATION:
        row = []
        for m in ms:
            res = plan_search(prof, 8, m, args.limit, **flags)
            own = res.searched or res.best
            row.append(f"{res.plan.baseline('dapple_plus') / own.makespan:.3f}x")
        print(f"| {label} | " + " | ".join(row) + " |")
    for m in ms:
        print(f"\n## plan, m={m}\n\n```\n{render(prof, results[m])}\n```")
    return 0


if __name__ == "__main__":
    sys.exit(main())
