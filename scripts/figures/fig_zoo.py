#!/usr/bin/env python
"""Today's schedules beside Obscura, each at its best plan: simulated throughput of
DAPPLE+, Obscura's own search on 1F1B, every schedule family of planner.families
(1F1B, interleaved V=2/4, ZB-H1, ZB-H2, ZB-1p/2p, the zero-bubble heuristic at the
limit, ZB-V, interleaved ZB, V-Half, V-Min: each stage's recompute and swaps chosen
for the limit on the family's own order, and Obscura's transformation where a
generator of it exists) and the planner's pick, for Llama-2 and GPT-3 28B at global
batch 16/32/64, p=8, 80 GiB per GPU, from the H200 profiles.

    python scripts/figures/fig_zoo.py [--out DIR] [--profile-dir results/h200]

--out defaults to figures_out/; `--out results/figures` regenerates the committed figure.
Writes fig_zoo.png and fig_zoo.csv: one row per system and case. A family that does
not fit has no iteration time and its `needs_gib`; one not evaluated (its chunks
would hold less than a layer, or its generator refuses the case) says why in `note`.
Labels carry V (model stages per device) and which variant of the search won
(plain: the family's order; obscura: Obscura's transformation on it; +swap).
"""
import argparse
import sys

import matplotlib

import figlib as L
from obscura_jax.cli.main import run_command
from obscura_jax.errors import UsageError
from experiments import figures as F
from experiments import paper as P
from planner.identify import parse_memory_limit


def _systems(rows) -> list[str]:
    return list(dict.fromkeys(r["system"] for r in rows))


def draw(rows, sources, families, batches, out):
    names = _systems(rows)
    cmap = matplotlib.colormaps["tab20"]
    colors = {n: cmap(i % 20) for i, n in enumerate(names)}
    fig, axes = L.new_figure(1, len(families), (7.5 * len(families), 4.2))
    width = 0.9 / len(names)
    for j, fam in enumerate(families):
        ax = axes[0][j]
        cell = [r for r in rows if r["family"] == fam]
        top = max((r["samples_per_s"] or 0.0) for r in cell) or 1.0
        for g, batch in enumerate(batches):
            for k, name in enumerate(names):
                r = next(x for x in cell if x["global_batch"] == batch and x["system"] == name)
                x = g + (k - (len(names) - 1) / 2) * width
                if r["samples_per_s"] is None:
                    text = "n/e" if not r["evaluated"] else "OOM"
                    ax.text(x, 0.02 * top, text, rotation=90, ha="center", va="bottom", fontsize=4.5,
                            color=colors[name])
                    continue
                ax.bar(x, r["samples_per_s"], width, color=colors[name], label=r["label"] if g == 0 else None)
        L.style_throughput_panel(ax, batches, top, 1.25,
                                 f"{P.FAMILIES[fam]} {cell[0]['model'].split('-')[1].upper()}", j == 0)
    axes[0][0].legend(fontsize=5.5, frameon=False, ncol=3, loc="upper left")
    title = (f"Schedules at their best plans: p={rows[0]['num_stages']}, seq {P.SEQ_LEN}, mb {P.MICRO_BATCH}, "
             f"{rows[0]['memory_limit_gib']:g} GiB per GPU (OOM: does not fit; n/e: not evaluated)")
    return L.save_figure(fig, out, "fig_zoo", title, sources)


def _cell(r) -> str:
    if r["iteration_s"] is not None:
        return f"{r['iteration_s']:.3f} s" + (f" ({r['variant']})" if r["variant"] and r["system"] != "pick" else "")
    if not r["evaluated"]:
        return "not evaluated"
    return f"does not fit, needs {r['needs_gib']:.1f} GiB" if r["needs_gib"] else "does not fit"


def summary(rows) -> list[str]:
    lines = []
    for (model, batch) in dict.fromkeys((r["model"], r["global_batch"]) for r in rows):
        case = [r for r in rows if r["model"] == model and r["global_batch"] == batch]
        cols = "; ".join(f"{r['label']} {_cell(r)}" for r in case if r["system"] != "pick")
        pick = next(r for r in case if r["system"] == "pick")
        lines.append(f"{model:<11} GBS {batch:>3}: {cols}  [pick {pick['note']} V={pick['virtual_stages']} "
                     f"via {pick['variant']}]")
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
