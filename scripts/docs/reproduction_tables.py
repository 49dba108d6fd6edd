#!/usr/bin/env python
"""docs/reproduction.md's tables, rendered from the committed figure CSVs, so the
doc's numbers are the CSVs' (a block between `<!-- table: NAME -->` and
`<!-- end table -->` is replaced by table NAME).

    python scripts/docs/reproduction_tables.py            # rewrite the blocks
    python scripts/docs/reproduction_tables.py --check    # exit 1 if a block is stale (a test runs this)

Tables: fig05 (recompute overhead at stage 0), fig12 (throughput, both DAPPLE+
baselines and both ceilings, the share of each ceiling's gain Obscura reaches), fig13
(per-stage peaks), fig14 (stage times), fig16 / fig16_analytic (ablation), calibration
(one-GPU engine vs simulator), zoo (every schedule family at its best plan, from
fig_zoo's CSV, and which wins by how much over the best other fitting one), stage_mfu
(the one measured figure), layout_sweep (results/sweeps). The prose's figures are
scripts/docs/doc_numbers.py's (`python scripts/docs/doc_numbers.py --write` renders both).
"""
from __future__ import annotations

import argparse
import csv
import json
import re
import sys
from pathlib import Path

from experiments.paper import SYSTEMS

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs/reproduction.md"
FIG = ROOT / "results/figures"
FAMILY = {"llama2": "Llama-2", "gpt3": "GPT-3"}
BLOCK = re.compile(r"(<!-- table: (\w+) -->\n)(.*?)(<!-- end table -->)", re.S)


def _rows(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _f(v: str, fmt: str = "%.3f") -> str:
    return "OOM" if v == "" else fmt % float(v)


def _vs(r: dict, base: str) -> str:
    """'1.164x / 1.176x (93%)': Obscura's speedup, the ceiling, the share of its gain."""
    sp, ceil = r[f"speedup_vs_{base}"], r[f"ceiling_vs_{base}"]
    if not sp or not ceil:
        return "-"
    share = (float(sp) - 1) / (float(ceil) - 1) if float(ceil) > 1 else float("nan")
    return f"{float(sp):.3f}x / {float(ceil):.3f}x ({100 * share:.0f}%)"


def _plan(r: dict) -> str:
    if not r["obscura_adjusted"]:
        return "no stage adjusted"
    stages = r["obscura_adjusted"].split()
    span = stages[0] if len(stages) == 1 else f"{stages[0]}-{stages[-1]}"
    return f"stages {span} adjusted, {r['order']} order"


def fig12_table() -> str:
    rows = [r for r in _rows(FIG / "fig12_throughput.csv") if r["memory_limit_gib"] == "80"]
    analytic = {name: {(r["model"], r["global_batch"]): r for r in _rows(FIG / name / "fig12_throughput.csv")
                       if r["system"] == "obscura" and r["memory_limit_gib"] == "80"}
                for name in ("analytic_h200", "analytic_a100")}
    head = ("| model | GBS | DAPPLE | DAPPLE+ unit | DAPPLE+ layer | OHP-CMB | Strawman | Obscura | "
            "vs unit: speedup / ceiling (share of gain) | vs layer: speedup / ceiling (share) | paper | "
            "Obscura's plan | analytic H200 vs unit | analytic A100 vs unit |")
    out = [head, "|" + "---|" * (head.count("|") - 1)]
    cases = sorted({(r["family"], r["model"], int(r["global_batch"])) for r in rows},
                   key=lambda c: (list(FAMILY).index(c[0]), c[1], c[2]))
    for fam, model, gbs in cases:
        by = {r["system"]: r for r in rows if r["model"] == model and int(r["global_batch"]) == gbs}
        ob = by["obscura"]
        paper = (f"{float(ob['paper_speedup_low']):.2f}-{float(ob['paper_speedup_high']):.2f}x"
                 if ob["paper_speedup_low"] else "-")
        an = [analytic[n].get((model, str(gbs))) for n in ("analytic_h200", "analytic_a100")]
        an_text = [f"{float(a['speedup_vs_dapple_plus']):.3f}x" if a and a["speedup_vs_dapple_plus"] else "-"
                   for a in an]
        size = model.split("-")[1].upper()
        out.append(f"| {FAMILY[fam]} {size} | {gbs} | " + " | ".join(
            _f(by[s]["samples_per_s"]) for s in ("dapple", "dapple_plus", "dapple_plus_layer", "ohp_cmb",
                                                  "strawman", "obscura"))
            + f" | {_vs(ob, 'dapple_plus')} | {_vs(ob, 'dapple_plus_layer')} | {paper} | {_plan(ob)} | "
            + " | ".join(an_text) + " |")
    return "\n".join(out) + "\n"


def _fig16(path: Path) -> str:
    """Per model and step: speedup over DAPPLE+ (unit / layer) per GBS, [adjusted stages],
    * = the step's best runs the strawman's or Recomp's own order."""
    rows = _rows(path)
    out = []
    for model in dict.fromkeys(r["model"] for r in rows):
        cell = [r for r in rows if r["model"] == model]
        batches = sorted({int(r["global_batch"]) for r in cell})
        out += [f"| {model}: unit / layer | " + " | ".join(f"GBS {b}" for b in batches) + " |",
                "|---|" + "---|" * len(batches)]
        for step in dict.fromkeys(r["step"] for r in cell):
            mine = {int(r["global_batch"]): r for r in cell if r["step"] == step}
            cells = []
            for b in batches:
                r = mine.get(b)
                if r is None or not r["speedup_vs_dapple_plus"]:
                    cells.append("-")
                    continue
                star = "*" if step not in ("ceiling", "strawman") and r["order"] in ("strawman", "recomp") else ""
                adj = f" [{r['adjusted'].replace(' ', ',')}]" if r["adjusted"] else ""
                cells.append(f"{float(r['speedup_vs_dapple_plus']):.3f} / "
                             f"{float(r['speedup_vs_dapple_plus_layer']):.3f}{adj}{star}")
            out.append(f"| {next(iter(mine.values()))['label']} | " + " | ".join(cells) + " |")
        out.append("")
    return "\n".join(out)


def fig16_table() -> str:
    return _fig16(FIG / "fig16_ablation.csv")


def fig16_analytic_table() -> str:
    return _fig16(FIG / "analytic_h200/fig16_ablation.csv")


def fig13_table() -> str:
    """Predicted peak GiB per stage and system (bold: over the limit)."""
    rows = _rows(FIG / "fig13_memory.csv")
    out = []
    for model in dict.fromkeys(r["model"] for r in rows):
        cell = [r for r in rows if r["model"] == model]
        stages = sorted({int(r["stage"]) for r in cell})
        out += [f"| {model} | " + " | ".join(f"s{s}" for s in stages) + " |", "|---|" + "---|" * len(stages)]
        for system in dict.fromkeys(r["system"] for r in cell):
            peaks = {int(r["stage"]): r for r in cell if r["system"] == system}
            out.append(f"| {SYSTEMS.get(system, system)} | " + " | ".join(
                (f"**{float(peaks[s]['peak_gib']):.1f}**" if peaks[s]["fits"] == "False"
                 else f"{float(peaks[s]['peak_gib']):.1f}") for s in stages) + " |")
        out.append("")
    return "\n".join(out)


def fig14_table() -> str:
    rows = _rows(FIG / "fig14_stage_time.csv")
    out = []
    for model in dict.fromkeys(r["model"] for r in rows):
        cell = [r for r in rows if r["model"] == model]
        out += [f"| {model} | iteration | stage 0 compute (of it recompute) | stage 0 bubble | last stage compute "
                "| last stage bubble | sum of compute | sum of bubbles |", "|---|---|---|---|---|---|---|---|"]
        for system in dict.fromkeys(r["system"] for r in cell):
            st = sorted((r for r in cell if r["system"] == system), key=lambda r: int(r["stage"]))
            f = lambda r, k: float(r[k])  # noqa: E731
            out.append(f"| {SYSTEMS.get(system, system)} | {f(st[0], 'makespan_s'):.3f} s | {f(st[0], 'compute_s'):.3f} "
                       f"({f(st[0], 'recompute_s'):.3f}) s | {f(st[0], 'bubble_s'):.3f} s | {f(st[-1], 'compute_s'):.3f} s "
                       f"| {f(st[-1], 'bubble_s'):.3f} s | {sum(f(r, 'compute_s') for r in st):.2f} s | "
                       f"{sum(f(r, 'bubble_s') for r in st):.2f} s |")
        out.append("")
    return "\n".join(out)


def calibration_table() -> str:
    """The one-GPU engine runs against the calibrated simulation (results/h200/calibration.json)."""
    cal = json.loads((ROOT / "results/h200/calibration.json").read_text())
    out = ["| run | measured | ideal simulation | calibrated simulation | measured / calibrated |",
           "|---|---|---|---|---|"]
    for r in cal["fit"]:
        out.append(f"| {r['run']} | {r['measured_s']:.4f} s | {r['ideal_s']:.4f} s | {r['calibrated_s']:.4f} s | "
                   f"{r['measured_over_calibrated']:.3f} |")
    out.append(f"\nFitted: launch overhead {cal['action_overhead'] * 1e6:.1f} us per action, optimizer "
               f"{cal['optimizer_s_per_byte'] * 1e12:.3f} s per TB of weight state; assumed: "
               f"{', '.join(cal['assumed']) or 'none'} (link sharing {cal['link_sharing']:g}).")
    return "\n".join(out) + "\n"


def fig05_table() -> str:
    """Recompute overhead at stage 0 (unit costs) beside the paper's measured figure."""
    out = ["| config | ours (simulated) | paper (measured) |", "|---|---|---|"]
    for r in _rows(FIG / "fig05_bubbles.csv"):
        if float(r["overhead_pct"]) == 0 and r["paper_pct"] and float(r["paper_pct"]) == 0:
            continue            # the baseline every overhead is over
        paper = f"+{float(r['paper_pct']):.0f}%" if r["paper_pct"] else "(not in the paper's Fig. 5)"
        out.append(f"| {r['config']} | +{float(r['overhead_pct']):.1f}% | {paper} |")
    return "\n".join(out) + "\n"


def stage_mfu_table() -> str:
    """The project's 5-layer stage (results/h200/stage_mfu.json, the cudnn/none rerun
    beside it) against the plain-JAX stack timed in the same run
    (results/h200/yardstick_plain_jax_stage.txt; `none` against its save-all-named-ops
    variant, the same residuals)."""
    h200 = ROOT / "results/h200"
    plain = {(m.group(1), m.group(2)): (float(m.group(3)), float(m.group(4))) for m in re.finditer(
        r"^(\w+)\s+(\w+)\s+fwd\+bwd\s+([\d.]+) ms\s+MFU\(\d+\)\s*([\d.]+)%",
        (h200 / "yardstick_plain_jax_stage.txt").read_text(), re.M)}
    rerun = {(r["attention"], r["policy"]): r for r in json.loads((h200 / "stage_mfu_none_cudnn_rerun.json").read_text())["rows"]}
    out = ["| attention | policy | project stage | MFU | plain-JAX stack, same run | project / plain |",
           "|---|---|---|---|---|---|"]
    for r in json.loads((h200 / "stage_mfu.json").read_text())["rows"]:
        key = (r["attention"], r["policy"])
        ms, again = r["fwd_bwd_s"] * 1e3, rerun.get(key)
        base, note = plain.get((key[0], "names_all" if key[1] == "none" else key[1])), \
            " (save all named ops)" if key[1] == "none" else ""
        cells = [f"{ms:.2f} ms" + (f" (rerun {again['fwd_bwd_s'] * 1e3:.2f})" if again else ""),
                 f"{100 * r['mfu']:.1f}%" + (f" ({100 * again['mfu']:.1f}%)" if again else ""),
                 f"{base[0]:.1f} ms, {base[1]:.1f}%{note}" if base else "-",
                 (f"{ms / base[0]:.3f}" + (f" ({again['fwd_bwd_s'] * 1e3 / base[0]:.3f})" if again else ""))
                 if base else "-"]
        out.append(f"| {key[0]} | {key[1]} | " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


# The layouts paper's best layout per case (its Table 2 and 3: A100, Megatron, FA2+RMS kernel).
LAYOUTS_PAPER = {("llama2-13b", 2): ("70.6%", "1/1/1/-"), ("llama2-13b", 8): ("62.8%", "1/2/2/on"),
                 ("llama-30b", 2): ("62.0%", "1/1/4/off"), ("llama-30b", 8): ("60.2%", "1/4/2/on")}


def layout_sweep_table() -> str:
    """The best layout of each sweep (results/sweeps, scripts/layouts/layout_sweeps.py) beside
    the paper's best."""
    out = ["| model, seq | paper best (A100, Megatron, FA2+RMS) | ours, analytic costs | ours, H200-measured layer costs |",
           "|---|---|---|---|"]
    for (model, k), (mfu, label) in LAYOUTS_PAPER.items():
        cells = []
        for costs in ("analytic", "measured"):
            best = next(r for r in _rows(ROOT / f"results/sweeps/{model}_{k}k_{costs}.csv") if r["fits"] == "True")
            same = best["label"].rsplit("/", 1)[0] == label.rsplit("/", 1)[0] and (best["tp"] == "1" or best["label"] == label)
            cells.append(f"{100 * float(best['mfu']):.1f}% {best['label']} {best['policy']}"
                         + (" (the paper's layout)" if same else ""))
        out.append(f"| {model.split('-')[1].upper()} {k}k | {mfu} {label} | " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


def families_table() -> str:
    """Every schedule family at its best plan (results/figures/fig_zoo.csv): per model
    and global batch, each family's simulated iteration or what it needs, and which
    family wins by how much over the best other fitting one."""
    rows = _rows(FIG / "fig_zoo.csv")
    cases = list(dict.fromkeys((r["model"], r["global_batch"]) for r in rows))
    systems = [r for r in rows if (r["model"], r["global_batch"]) == cases[0] and r["system"] != "pick"]
    out = ["| system | " + " | ".join(f"{m} GBS {b}" for m, b in cases) + " |",
           "|---|" + "---|" * len(cases)]

    def cell(r: dict) -> str:
        if r["iteration_s"]:
            return f"{float(r['iteration_s']):.3f} s" + (f" ({r['variant']})" if r["variant"] else "")
        if r["evaluated"] != "True":
            return "not evaluated"
        return f"does not fit (needs {float(r['needs_gib']):.0f} GiB)" if r["needs_gib"] else "does not fit"
    for sys_row in systems:
        by_case = {(r["model"], r["global_batch"]): r for r in rows if r["system"] == sys_row["system"]}
        out.append(f"| {sys_row['label']} | " + " | ".join(cell(by_case[c]) for c in cases) + " |")
    out.append("")
    for model, batch in cases:
        fams = sorted((float(r["iteration_s"]), r["label"]) for r in rows if (r["model"], r["global_batch"]) ==
                      (model, batch) and r["system"].startswith("family:") and r["iteration_s"])
        if len(fams) >= 2:
            (t0, win), (t1, second) = fams[0], fams[1]
            out.append(f"- {model}, GBS {batch}: {win} wins, {100 * (t1 / t0 - 1):.1f}% ahead of {second} "
                       f"({t0:.3f} s against {t1:.3f} s).")
    return "\n".join(out) + "\n"


TABLES = {"fig12": fig12_table, "fig13": fig13_table, "fig14": fig14_table, "fig16": fig16_table,
          "fig16_analytic": fig16_analytic_table, "calibration": calibration_table,
          "fig05": fig05_table, "stage_mfu": stage_mfu_table, "layout_sweep": layout_sweep_table, "zoo": families_table}


def render(doc: str) -> str:
    def fill(m):
        name = m.group(2)
        if name not in TABLES:
            raise SystemExit(f"docs/reproduction.md names unknown table {name!r} (known: {', '.join(TABLES)})")
        return m.group(1) + TABLES[name]() + m.group(4)
    return BLOCK.sub(fill, doc)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if docs/reproduction.md's tables are stale")
    args = ap.parse_args(argv)
    doc = DOC.read_text()
    new = render(doc)
    if args.check:
        if new != doc:
            print("docs/reproduction.md: tables are stale; run python scripts/docs/reproduction_tables.py",
                  file=sys.stderr)
            return 1
        return 0
    DOC.write_text(new)
    print(f"wrote {DOC.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
