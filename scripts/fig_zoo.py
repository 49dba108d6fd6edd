#!/usr/bin/env python
"""Today's schedules beside Obscura: simulated throughput of DAPPLE+, interleaved 1F1B
+ full recompute, ZB-H1 + full recompute, Obscura (on 1F1B), Obscura on interleaved,
Obscura on ZB-H1 and the planner's pick (the family it chooses), for Llama-2 and
GPT-3 28B at global batch 16/32/64, p=8, 80 GiB per GPU, from the H200 profiles.

    python scripts/fig_zoo.py [--out DIR] [--profile-dir results/h200]

--out defaults to figures_out/; `--out results/figures` regenerates the committed figure.
Writes fig_zoo.png and fig_zoo.csv (one row per system and case; empty iteration
time = does not fit, "OOM"; `simulated_s_if_it_fit` says what it would take).
The H200 profiles have no measured I/W split: ZB-H1's I and W are priced at half
a backward each (schedules.costs' default), the ideal split.
"""
import argparse
import sys

import figlib as L
from obscura_jax.cli.main import run_command
from obscura_jax.errors import UsageError
from experiments import figures as F
from experiments import paper as P
from planner.identify import parse_memory_limit

COLORS = {"dapple_plus": "#4C72B0", "interleaved_full": "#64B5CD", "zb_h1_full": "#8172B3",
          "obscura": "#C44E52", "obscura_interleaved": "#DD8452", "obscura_zb_h1": "#937860", "pick": "#55A868"}


def draw(rows, sources, families, batches, out):
    names = list(F.ZOO_SYSTEMS)
    fig, axes = L.new_figure(1, len(families), (6.0 * len(families), 3.6))
    width = 0.84 / len(names)
    for j, fam in enumerate(families):
        ax = axes[0][j]
        cell = [r for r in rows if r["family"] == fam]
        top = max((r["samples_per_s"] or 0.0) for r in cell) or 1.0
        for g, batch in enumerate(batches):
            for k, name in enumerate(names):
                r = next(x for x in cell if x["global_batch"] == batch and x["system"] == name)
                x = g + (k - (len(names) - 1) / 2) * width
                if r["samples_per_s"] is None:
                    ax.text(x, 0.02 * top, "OOM", rotation=90, ha="center", va="bottom", fontsize=6,
                            color=COLORS[name])
                    continue
                ax.bar(x, r["samples_per_s"], width, color=COLORS[name], label=r["label"] if g == 0 else None)
                if name == "pick":
                    ax.text(x, r["samples_per_s"] * 1.01, f"{r['schedule']}\nx{r['speedup_vs_dapple_plus']:.2f}",
                            ha="center", va="bottom", fontsize=5.5)
        ax.set_xticks(range(len(batches)))
        ax.set_xticklabels([f"GBS {b}" for b in batches], fontsize=7)
        ax.set_ylim(0, top * 1.35)
        ax.tick_params(axis="y", labelsize=7)
        ax.set_title(f"{P.FAMILIES[fam]} {cell[0]['model'].split('-')[1].upper()}", fontsize=9, loc="left")
        if j == 0:
            ax.set_ylabel("samples / s (simulated)", fontsize=8)
        for side in ("top", "right"):
            ax.spines[side].set_visible(False)
    axes[0][0].legend(fontsize=6.5, frameon=False, ncol=2, loc="upper left")
    title = (f"Schedules beside Obscura: p={rows[0]['num_stages']}, seq {P.SEQ_LEN}, mb {P.MICRO_BATCH}, "
             f"{rows[0]['memory_limit_gib']:g} GiB per GPU; the pick's label: its schedule, speedup over DAPPLE+")
    return L.save_figure(fig, out, "fig_zoo", title, sources)


def summary(rows) -> list[str]:
    lines = []
    for (model, batch) in dict.fromkeys((r["model"], r["global_batch"]) for r in rows):
        case = [r for r in rows if r["model"] == model and r["global_batch"] == batch]
        cols = "  ".join(f"{r['label']} " + ("OOM" if r["iteration_s"] is None else f"{r['iteration_s']:.3f} s")
                         for r in case)
        pick = next(r for r in case if r["system"] == "pick")
        lines.append(f"{model:<11} GBS {batch:>3}: {cols}  [pick {pick['schedule']} V={pick['virtual_stages']} "
                     f"via {pick['pick_source']}]")
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    L.add_common_args(ap, "28b", "16,32,64")
    args = ap.parse_args(argv)

    def body() -> int:
        families, sizes, batches = L.common_inputs(args)
        if len(sizes) != 1:
            raise UsageError(f"fig_zoo draws one model size, got --sizes {args.sizes}")
        parse_memory_limit(args.memory_limit)
        sources = L.load_sources(families, args.profile_dir, args.analytic)
        tasks = [(src, size, b, args.memory_limit, args.stages, args.reserve)
                 for src in sources for size in sizes for b in batches]
        rows = F.run_tasks(F.zoo_rows, tasks, args.jobs)
        return L.publish(args.out, "fig_zoo", rows, sources, lambda: draw(rows, sources, families, batches, args.out),
                         summary(rows))

    return run_command("fig_zoo", body)


if __name__ == "__main__":
    sys.exit(main())
