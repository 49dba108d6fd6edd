#!/usr/bin/env python
"""Fig. 14: simulated per-stage compute, bubble and total time of the 23B models
(p=8, 80 GiB) for DAPPLE+, Strawman and Obscura.

    python scripts/figures/fig14_stage_time.py [--out DIR] [--profile-dir results/h200]

--out defaults to figures_out/; `--out results/figures` regenerates the committed figure.

Per stage: compute = forwards + backwards (recompute included, shown hatched);
total = when the stage finishes its last op; bubble = total - compute (every idle
gap before that, the start-up wait included). Writes fig14_stage_time.png and
fig14_stage_time.csv (one row per system and stage, with the paper's forward and
backward bubbles split out).
"""
import argparse
import sys

import figlib as L
from experiments import figures as F
from experiments import paper as P

SHOWN = ("dapple_plus", "strawman", "obscura")
COLORS = {"dapple_plus": "#4C72B0", "strawman": "#DD8452", "obscura": "#C44E52"}


def draw(rows, sources, cases, out):
    fig, axes = L.new_figure(len(cases), 1, (10.5, 3.3 * len(cases)))
    width = 0.8 / len(SHOWN)
    for i, (model, batch) in enumerate(cases):
        ax = axes[i][0]
        cell = [r for r in rows if r["model"] == model and r["global_batch"] == batch]
        stages = sorted({r["stage"] for r in cell})
        for k, name in enumerate(SHOWN):
            mine = sorted((r for r in cell if r["system"] == name), key=lambda r: r["stage"])
            xs = [s + (k - (len(SHOWN) - 1) / 2) * width for s in stages]
            plain = [r["compute_s"] - r["recompute_s"] for r in mine]
            rec = [r["recompute_s"] for r in mine]
            ax.bar(xs, plain, width, color=COLORS[name], label=f"{P.SYSTEMS[name]} compute")
            ax.bar(xs, rec, width, bottom=plain, color=COLORS[name], hatch="////", edgecolor="white", lw=0)
            ax.bar(xs, [r["bubble_s"] for r in mine], width, bottom=[r["compute_s"] for r in mine],
                   color=COLORS[name], alpha=0.25, label=f"{P.SYSTEMS[name]} bubble")
        makespan = {r["system"]: r["makespan_s"] for r in cell}
        ax.set_xticks(stages)
        ax.set_xticklabels([f"stage {s}" for s in stages], fontsize=7)
        ax.tick_params(axis="y", labelsize=7)
        ax.set_ylabel("seconds per iteration", fontsize=8)
        ax.set_ylim(0, max(makespan.values()) * 1.25)
        spans = ", ".join(f"{P.SYSTEMS[n]} {makespan[n]:.3f} s" for n in SHOWN)
        ax.set_title(f"{model}, global batch {batch}; iteration: {spans}", fontsize=9, loc="left")
        ax.legend(fontsize=6, frameon=False, ncol=len(SHOWN) * 2, loc="upper center")
        for side in ("top", "right"):
            ax.spines[side].set_visible(False)
    title = "Fig. 14: per-stage compute (hatched: recompute), bubble (light) and total (bar height)"
    return L.save_figure(fig, out, "fig14_stage_time", title, sources)


def table(rows, model, batch) -> list[str]:
    cell = [r for r in rows if r["model"] == model and r["global_batch"] == batch]
    lines = [f"{model}, global batch {batch}: compute (recompute) / bubble / total, seconds"]
    for name in SHOWN:
        mine = sorted((r for r in cell if r["system"] == name), key=lambda r: r["stage"])
        lines.append(f"{P.SYSTEMS[name]:<9} " + "  ".join(
            f"s{r['stage']} {r['compute_s']:.2f}({r['recompute_s']:.2f})/{r['bubble_s']:.2f}/{r['total_s']:.2f}"
            for r in mine))
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    L.add_common_args(ap, "23b", "32")
    args = ap.parse_args(argv)
    return L.per_case_figure("fig14_stage_time", args, F.stage_time_rows, draw, table)


if __name__ == "__main__":
    sys.exit(main())
