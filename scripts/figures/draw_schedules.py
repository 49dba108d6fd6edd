#!/usr/bin/env python
"""Draw Gantt charts in the style of the paper's Figs. 2 (bubbles of 1F1B and
on-demand recompute), 4 (strawman), 6 (dependency relaxation) and 9 (swapping),
all simulated for p=4, m=8. PNG and SVG each.

    python scripts/figures/draw_schedules.py [--out DIR]     # default figures_out/schedules
"""
import argparse
import sys
from pathlib import Path

from figlib import FIGURES_OUT
from obscura_jax.cli.main import run_command
from schedules import StageCosts, generate, simulate
from schedules.formats.gantt import draw_gantts, draw_memory


def schedule_figures(out_dir) -> list[Path]:
    """Gantt charts in the style of the paper's Figs. 2, 4, 6 and 9 (p=4, m=8)."""
    out = Path(out_dir)
    p, m = 4, 8
    unit = StageCosts.uniform(p, 1.0, 2.0, 1.0)
    sim = lambda name, costs=unit, **kw: simulate(generate(name, p, m, costs=costs, **kw), costs)  # noqa: E731
    written = []
    # Fig. 2: where the bubbles are, and what recompute costs without moving anything
    written += draw_gantts([sim("1f1b"), sim("recomp", adjusted="all"), sim("recomp", adjusted=0)],
                           out / "fig02_bubbles.png", ["1F1B (DAPPLE)", "Recomp-All (DAPPLE+)", "Recomp-0"])
    # Fig. 4: pipeline transformation, forwards migrate into stage 0's forward bubble
    written += draw_gantts([sim("recomp", adjusted=0), sim("strawman", adjusted=0), sim("strawman", adjusted=1)],
                           out / "fig04_strawman.png", ["Recomp-0", "Strawman-0", "Strawman-1"])
    # Fig. 6: dependency relaxation. Stage 0 is 1.6x slower (the embedding and one
    # more unit live there): the strawman's strict alternation leaves bubbles that
    # relaxed forwards fill
    slow0 = StageCosts(fwd=(1.6, 1, 1, 1), bwd=(3.2, 2, 2, 2), recompute=(1.6, 1, 1, 1))
    written += draw_gantts([sim("strawman", slow0, adjusted=1), sim("obscura", slow0, adjusted=1)],
                           out / "fig06_relaxation.png",
                           ["Strawman-1, stage 0 1.6x slower", "Obscura-1 (relaxed, migration-optimized)"])
    # Fig. 9: swapping-aware recompute, kept 1 unit per micro-batch, host link 1 unit per 0.5 time
    swap_costs = StageCosts.uniform(p, 1.0, 2.0, 1.0, act_bytes=1.0, host_bandwidth=2.0)
    plain = sim("obscura", swap_costs, adjusted=1)
    swapped = sim("obscura", swap_costs, adjusted=1, swap_blocks=2, swap_fraction=1.0)
    written += draw_gantts([plain, swapped], out / "fig09_swapping.png",
                           ["Obscura-1, no swap", "Obscura-1, lambda_1=2, lambda_0=3, beta=1"])
    written += draw_memory(swapped, out / "fig09_memory.png", "Obscura-1 with swapping: resident activations",
                           unit_name="blocks")
    return written


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=f"{FIGURES_OUT}/schedules",
                    help=f"output folder (default {FIGURES_OUT}/schedules)")
    args = ap.parse_args(argv)

    def body() -> int:
        for f in schedule_figures(args.out):
            print(f"wrote {f}")
        return 0

    return run_command("draw_schedules", body)


if __name__ == "__main__":
    sys.exit(main())
