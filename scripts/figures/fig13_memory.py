#!/usr/bin/env python
"""Fig. 13: simulated per-stage peak memory of the 28B models (p=8) for DAPPLE,
DAPPLE+, Recomp-N, OHP-CMB, Strawman and Obscura against the 80 GiB limit.

    python scripts/figures/fig13_memory.py [--out DIR] [--profile-dir results/h200]

--out defaults to figures_out/; `--out results/figures` regenerates the committed figure.

Peak = weights (params + grads + optimizer state) + activations kept (the
simulator's peak, or the planner's count if larger) + the recompute working set.
Writes fig13_memory.png and fig13_memory.csv (one row per system and stage).
"""
import argparse
import sys

import figlib as L
from experiments import figures as F
from experiments import paper as P

SHOWN = ("dapple", "dapple_plus", "dapple_plus_layer", "recomp", "ohp_cmb", "strawman", "obscura")
COLORS = {"dapple": "#8C8C8C", "dapple_plus": "#4C72B0", "dapple_plus_layer": "#2A3F66", "recomp": "#55A868",
          "ohp_cmb": "#64B5CD",
          "strawman": "#DD8452", "obscura": "#C44E52"}


def draw(rows, sources, cases, out):
    fig, axes = L.new_figure(len(cases), 1, (10.5, 3.2 * len(cases)))
    width = 0.8 / len(SHOWN)
    for i, (model, batch) in enumerate(cases):
        ax = axes[i][0]
        cell = [r for r in rows if r["model"] == model and r["global_batch"] == batch]
        stages = sorted({r["stage"] for r in cell})
        limit = cell[0]["memory_limit_gib"]
        for k, name in enumerate(SHOWN):
            mine = sorted((r for r in cell if r["system"] == name), key=lambda r: r["stage"])
            xs = [s + (k - (len(SHOWN) - 1) / 2) * width for s in stages]
            ax.bar(xs, [r["weights_gib"] for r in mine], width, color=COLORS[name], alpha=0.45,
                   hatch="////", edgecolor="white", lw=0)
            ax.bar(xs, [r["activations_gib"] + r["working_gib"] for r in mine], width,
                   bottom=[r["weights_gib"] for r in mine], color=COLORS[name], label=P.SYSTEMS[name])
            for x, r in zip(xs, mine):
                if not r["fits"]:
                    ax.text(x, r["peak_gib"] + 1, "OOM", rotation=90, ha="center", va="bottom", fontsize=5.5)
        ax.axhline(limit, color="black", ls="--", lw=1)
        ax.text(stages[-1] + 0.45, limit, f"{limit:g} GiB", fontsize=7, ha="right", va="bottom")
        top = max(r["peak_gib"] for r in cell)
        ax.set_ylim(0, max(top, limit) * 1.15)
        ax.set_xticks(stages)
        ax.set_xticklabels([f"stage {s}" for s in stages], fontsize=7)
        ax.tick_params(axis="y", labelsize=7)
        ax.set_ylabel("peak memory (GiB)", fontsize=8)
        ax.set_title(f"{model}, global batch {batch}", fontsize=9, loc="left")
        for side in ("top", "right"):
            ax.spines[side].set_visible(False)
    axes[0][0].legend(fontsize=6.5, frameon=False, ncol=len(SHOWN), loc="upper right")
    title = "Fig. 13: per-stage peak memory (hatched: weights + grads + optimizer state; solid: activations)"
    return L.save_figure(fig, out, "fig13_memory", title, sources)


def table(rows, model, batch) -> list[str]:
    cell = [r for r in rows if r["model"] == model and r["global_batch"] == batch]
    stages = sorted({r["stage"] for r in cell})
    lines = [f"{model}, global batch {batch}: peak GiB per stage (limit {cell[0]['memory_limit_gib']:g})",
             f"{'system':<16}" + "".join(f"{s:>8}" for s in stages)]
    for name in SHOWN:
        mine = {r["stage"]: r for r in cell if r["system"] == name}
        lines.append(f"{P.SYSTEMS[name]:<16}" + "".join(
            f"{mine[s]['peak_gib']:>7.1f}{'' if mine[s]['fits'] else '!'}" for s in stages))
    return lines + ["('!' = over the limit)"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    L.add_common_args(ap, "28b", "32")
    args = ap.parse_args(argv)
    return L.per_case_figure("fig13_memory", args, F.memory_rows, draw, table)


if __name__ == "__main__":
    sys.exit(main())
