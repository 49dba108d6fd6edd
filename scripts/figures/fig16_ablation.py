#!/usr/bin/env python
"""Fig. 16: simulated ablation of Obscura vs global batch (16..128) on Llama-2 23B and 28B
(p=8, 80 GiB): speedup over DAPPLE+ (unit and layer granular: one row of panels each) of dependency relaxation alone, + swapping-
aware recompute, + partition adjustment, + CMB-Identifying (= full Obscura), with
the strawman and the no-recompute ceiling from the same runs.

    python scripts/figures/fig16_ablation.py [--out DIR] [--profile-dir results/h200]

--out defaults to figures_out/; `--out results/figures` regenerates the committed figure.

Steps (planner switches): relaxation only = the obscura schedule with whole-unit
recompute on the adjusted stages, no swapping, even partition, no CMB (ip, swap,
partition, cmb off); each next step turns one more on. Writes fig16_ablation.png
and fig16_ablation.csv (one row per step and global batch).
"""
import argparse
import sys

import figlib as L
from obscura_jax.cli.main import run_command
from experiments import figures as F
from experiments import paper as P

# colour, line style, marker, marker size (larger ones first so overlapping lines stay visible)
STYLE = {"ceiling": ("#8C8C8C", ":", "s", 7), "strawman": ("#DD8452", "--", "v", 6),
         "relaxation": ("#64B5CD", "-", "o", 4), "swap_recompute": ("#55A868", "-", "D", 6),
         "partition": ("#8172B3", "-", "x", 6), "cmb": ("#C44E52", "-", "o", 3)}


STEPS = tuple(key for key, _ in P.ABLATION_STEPS)
BASES = (("dapple_plus", "DAPPLE+ (unit)"), ("dapple_plus_layer", "DAPPLE+ (layer)"))


def draw(rows, sources, models, out):
    fig, axes = L.new_figure(len(BASES), len(models), (5.6 * len(models), 3.6 * len(BASES)))
    for (i, (base, base_label)), (j, model) in ((b, m) for b in enumerate(BASES) for m in enumerate(models)):
        ax = axes[i][j]
        col = f"speedup_vs_{base}"
        cell = [r for r in rows if r["model"] == model]
        for key in STYLE:
            mine = sorted((r for r in cell if r["step"] == key and r[col]), key=lambda r: r["global_batch"])
            if not mine:
                continue
            color, ls, marker, size = STYLE[key]
            ax.plot([r["global_batch"] for r in mine], [r[col] for r in mine], ls=ls,
                    marker=marker, ms=size, mfc="none" if marker != "x" else color, color=color, lw=1.2,
                    label=mine[0]["label"])
        batches = sorted({r["global_batch"] for r in cell})
        ax.set_xscale("log", base=2)
        ax.set_xticks(batches)
        ax.set_xticklabels([str(b) for b in batches], fontsize=7)
        ax.minorticks_off()
        ax.axhline(1.0, color="black", lw=0.6)
        ax.tick_params(axis="y", labelsize=7)
        ax.set_xlabel("global batch (= micro-batches, mb 1)", fontsize=8)
        ax.set_ylabel(f"speedup over {base_label}", fontsize=8)
        ax.set_title(model, fontsize=9, loc="left")
        ax.legend(fontsize=6.5, frameon=False, loc="lower left")
        for side in ("top", "right"):
            ax.spines[side].set_visible(False)
    title = f"Fig. 16: ablation, p={rows[0]['num_stages']}, {rows[0]['memory_limit_gib']:g} GiB per GPU"
    return L.save_figure(fig, out, "fig16_ablation", title, sources)


def table(rows, model, base: str = "dapple_plus", base_label: str = "DAPPLE+ (unit)") -> list[str]:
    cell = [r for r in rows if r["model"] == model]
    batches = sorted({r["global_batch"] for r in cell})
    lines = [f"{model}: speedup over {base_label} [adjusted stages]",
             f"{'step':<38}" + "".join(f"{'GBS ' + str(b):>20}" for b in batches)]
    for key in STYLE:
        mine = {r["global_batch"]: r for r in cell if r["step"] == key}
        if not mine:
            continue
        label = next(iter(mine.values()))["label"]
        cells = []
        for b in batches:
            r = mine.get(b)
            sp = r and r[f"speedup_vs_{base}"]
            star = "*" if key in STEPS and r and r["order"] in ("strawman", "recomp") else ""
            cells.append("-" if not sp else f"{sp:.3f} [{r['adjusted'] or '-'}]{star}")
        lines.append(f"{label:<38}" + "".join(f"{c:>20}" for c in cells))
    if any(c.endswith("*") for c in "".join(lines).split()):
        lines.append("* the search's best runs the strawman's or Recomp's own order: no relaxed order simulated faster")
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    L.add_common_args(ap, "23b,28b", "16,32,64,128", families="llama2")
    args = ap.parse_args(argv)

    def body() -> int:
        families, sizes, batches = L.common_inputs(args)
        sources = L.load_sources(families, args.profile_dir, args.analytic)
        # largest batches first, so the slowest plans start early on the workers
        tasks = [(src, size, b, args.memory_limit, args.stages, run, args.reserve)
                 for b in sorted(batches, reverse=True) for src in sources for size in sizes
                 for run in P.ABLATION_RUNS]
        rows = F.run_tasks(F.ablation_rows, tasks, args.jobs)
        for r in rows:
            r["num_stages"] = args.stages
        order = {k: i for i, k in enumerate(STYLE)}
        rows.sort(key=lambda r: (r["model"], r["global_batch"], order[r["step"]]))
        models = list(dict.fromkeys(r["model"] for r in rows))
        return L.publish(args.out, "fig16_ablation", rows, sources,
                         lambda: draw(rows, sources, models, args.out),
                         ["\n".join(table(rows, model, *b)) for model in models for b in BASES])

    return run_command("fig16_ablation", body)


if __name__ == "__main__":
    sys.exit(main())
