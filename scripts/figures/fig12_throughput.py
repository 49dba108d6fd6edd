#!/usr/bin/env python
"""Fig. 12: simulated throughput of DAPPLE, DAPPLE+, OHP-CMB, Strawman and Obscura
for Llama-2 and GPT-3 18/23/28B at global batch 16/32/64, p=8, 80 GiB per GPU
(the paper's A100-80GB), with Obscura's speedup over DAPPLE+ beside the paper's;
beside them the fastest schedule family at its best plan (planner.families: every
family's stages recompute and swap what its own order needs; the bar is labelled
with the family). Also plans every case at the H200's full memory (CSV only).

    python scripts/figures/fig12_throughput.py [--out DIR] [--profile-dir results/h200]

--out defaults to figures_out/; `--out results/figures` regenerates the committed figure.

Writes fig12_throughput.png and fig12_throughput.csv (one row per system and case;
empty iteration time = does not fit, "OOM").
"""
import argparse
import sys

import figlib as L
from obscura_jax.cli.main import run_command
from experiments import figures as F
from experiments import paper as P
from planner.identify import parse_memory_limit
from schedules.sizes import GiB

SHOWN = ("dapple", "dapple_plus", "dapple_plus_layer", "ohp_cmb", "strawman", "obscura", "best_family")
COLORS = {"dapple": "#8C8C8C", "dapple_plus": "#4C72B0", "dapple_plus_layer": "#2A3F66", "ohp_cmb": "#64B5CD",
          "strawman": "#DD8452", "obscura": "#C44E52", "best_family": "#55A868"}
LABELS = {**P.SYSTEMS, "best_family": "fastest family at its best"}


def _vs(r, base: str, tag: str) -> str:
    """'u x1.15 (max 1.18)': Obscura over a DAPPLE+ and that DAPPLE+'s ceiling."""
    sp, ceil = r[f"speedup_vs_{base}"], r[f"ceiling_vs_{base}"]
    if sp is None:
        return f"{tag} -"
    return f"{tag} x{sp:.2f}" + (f" (max {ceil:.2f})" if ceil else "")


def draw(rows, sources, families, sizes, batches, limit_gib, out):
    fig, axes = L.new_figure(len(families), len(sizes), (4.2 * len(sizes), 3.1 * len(families)))
    width = 0.8 / len(SHOWN)
    for i, fam in enumerate(families):
        for j, size in enumerate(sizes):
            ax = axes[i][j]
            cell = [r for r in rows if r["family"] == fam and r["model"].endswith(size)
                    and r["memory_limit_gib"] == limit_gib]
            top = max((r["samples_per_s"] or 0.0) for r in cell) or 1.0
            for g, batch in enumerate(batches):
                for k, name in enumerate(SHOWN):
                    r = next(x for x in cell if x["global_batch"] == batch and x["system"] == name)
                    x = g + (k - (len(SHOWN) - 1) / 2) * width
                    if r["samples_per_s"] is None:
                        ax.text(x, 0.02 * top, "OOM", rotation=90, ha="center", va="bottom", fontsize=6,
                                color=COLORS[name])
                        continue
                    ax.bar(x, r["samples_per_s"], width, color=COLORS[name],
                           label=LABELS[name] if g == 0 else None)
                    if name == "best_family":
                        ax.text(x, r["samples_per_s"] * 1.01, r["order"].split(" (")[0], rotation=90,
                                ha="center", va="bottom", fontsize=4.5)
                    if name == "obscura" and r["speedup_vs_dapple_plus"]:
                        paper = ("\npaper %.2f-%.2f" % (r["paper_speedup_low"], r["paper_speedup_high"])
                                 if r["paper_speedup_low"] else "")
                        ax.text(x, r["samples_per_s"] * 1.01, "%s\n%s%s" % (
                            _vs(r, "dapple_plus", "u"), _vs(r, "dapple_plus_layer", "l"), paper),
                                ha="center", va="bottom", fontsize=5)
            L.style_throughput_panel(ax, batches, top, 1.3, f"{P.FAMILIES[fam]} {size.upper()}", j == 0)
    axes[0][0].legend(fontsize=6.5, frameon=False, ncol=2, loc="upper left")
    title = (f"Fig. 12: throughput, p={rows[0]['num_stages']}, seq {P.SEQ_LEN}, mb {P.MICRO_BATCH}, "
             f"{limit_gib:g} GiB per GPU; label = Obscura / DAPPLE+ (u: unit, l: layer; max: no recompute, unlimited memory) and the paper's")
    return L.save_figure(fig, out, "fig12_throughput", title, sources)


def _ratio(r, base: str) -> str:
    sp, ceil = r[f"speedup_vs_{base}"], r[f"ceiling_vs_{base}"]
    return f"{'-' if sp is None else '%.3f' % sp} (max {'-' if ceil is None else '%.3f' % ceil})"


def summary(rows, limit_gib) -> list[str]:
    lines = []
    for r in rows:
        if r["system"] != "obscura" or r["memory_limit_gib"] != limit_gib:
            continue
        case = [x for x in rows if x["model"] == r["model"] and x["global_batch"] == r["global_batch"]
                and x["memory_limit_gib"] == limit_gib]
        cols = "  ".join("%s %s" % (LABELS[x["system"]], "OOM" if x["samples_per_s"] is None
                                    else "%.3f" % x["samples_per_s"]) for x in case if x["system"] in SHOWN)
        paper = " (paper %.2f-%.2f)" % (r["paper_speedup_low"], r["paper_speedup_high"]) if r["paper_speedup_low"] else ""
        lines.append(f"{r['model']:<11} GBS {r['global_batch']:>3} @ {limit_gib:g} GiB  samples/s: {cols}  "
                     f"Obscura/DAPPLE+ {_ratio(r, 'dapple_plus')} unit, {_ratio(r, 'dapple_plus_layer')} layer{paper}  "
                     f"[Obscura: {r['obscura_schedule']}, adjusted {r['obscura_adjusted'] or 'none'}, "
                     f"{r['order']} order; fastest family: {_best(case)}]")
    return lines


def _best(case) -> str:
    r = next(x for x in case if x["system"] == "best_family")
    return r["order"] + ("" if r["iteration_s"] is None else f" {r['samples_per_s']:.3f}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    L.add_common_args(ap, "18b,23b,28b", "16,32,64")
    ap.add_argument("--h200-limit", default=P.H200_LIMIT,
                    help=f"second limit planned for the CSV (default {P.H200_LIMIT}, the H200's total; 'none' skips)")
    args = ap.parse_args(argv)

    def body() -> int:
        families, sizes, batches = L.common_inputs(args)
        limits = [args.memory_limit] + ([] if args.h200_limit.lower() == "none" else [args.h200_limit])
        for lim in limits:
            parse_memory_limit(lim)
        sources = L.load_sources(families, args.profile_dir, args.analytic)
        tasks = [(src, size, b, lim, args.stages, args.reserve) for lim in limits for size in reversed(sizes)
                 for src in sources for b in batches]
        rows = F.run_tasks(F.throughput_rows, tasks, args.jobs)
        rows.sort(key=lambda r: (families.index(r["family"]), sizes.index(r["model"].split("-")[1]),
                                 r["memory_limit_gib"], r["global_batch"]))
        limit_gib = round(parse_memory_limit(args.memory_limit) / GiB, 3)
        limits_gib = sorted({r["memory_limit_gib"] for r in rows})
        return L.publish(args.out, "fig12_throughput", rows, sources,
                         lambda: draw(rows, sources, families, sizes, batches, limit_gib, args.out),
                         ["\n".join(summary(rows, lim)) for lim in limits_gib])

    return run_command("fig12_throughput", body)


if __name__ == "__main__":
    sys.exit(main())
