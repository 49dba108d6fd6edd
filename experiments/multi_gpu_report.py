"""What the multi-GPU bench's runs say together (experiments/multi_gpu_bench.py runs them).

From runs/<label>.json (train JSON, label m<m>_<layout>_<run>) and plans/plans.json:

- per run: iteration time, tokens/s, per-stage peak (memory_stats, else the
  accounting), measured / simulated (the simulator on the costs measured in the run);
- Obscura vs DAPPLE+ (Recomp-All): measured speedup beside the plan's predicted one.
  Each run's gap to its prediction splits exactly into terms (seconds):

      I - P = (S - P)      costs:   the plan's profile vs the costs measured in the run
            + (Fm - Fs)    F/B:     compute per stage, measured timeline - simulated (mean over stages)
            + (Wm - Ws)    waits:   comm wait (p2p transfers, swap-ins), measured - simulated
            + (rest)       bubbles: the recorded step's other idle time
            + (I - M)      step:    optimizer + step start/end (not in the plan's makespan)

  with P predicted, S simulated and M measured makespans, I the median iteration.
  Speedup = I_dapple+ / I_obscura, so ln(measured / predicted speedup) =
  ln(I/P)_dapple+ - ln(I/P)_obscura; each run's ln(I/P) is shared among its terms in
  proportion to them (the shares add up exactly); beyond a 5% gap the term that moved
  the speedup most in the gap's direction is named;
- swap under load (the swap pair, p-1 GPUs swapping at once): GB/s each way,
  overlap, fraction hidden (experiments.benchmark's formula), beside the one-GPU run.
"""
from __future__ import annotations

import json
import math
import re
from pathlib import Path

from experiments.benchmark import _hidden_fraction, pipeline_breakdown
from schedules.sizes import format_bytes

GAP = 0.05
TERMS = {"costs": "the plan's profile costs vs the costs measured in the run",
         "F/B": "per-action F/B durations in the pipeline vs their standalone costs",
         "waits": "p2p / swap-in waits (measured comm wait vs simulated)",
         "bubbles": "other idle time of the recorded step",
         "step": "optimizer step and step start/end (outside the plan's makespan)"}
LAYOUT_NAMES = {"proc": "one process per GPU", "one": "one process, all GPUs"}
_LABEL = re.compile(r"m(\d+)_(proc|one)_(\w+)")


def load_runs(out: Path) -> dict[str, dict]:
    """label -> train JSON, for every run under out/runs."""
    return {p.stem: json.loads(p.read_text()) for p in sorted((out / "runs").glob("*.json"))}


def run_row(label: str, res: dict) -> dict:
    """One run's figures (seconds, bytes)."""
    stages = res["stages"]
    return {"label": label, "iteration_time": res["iteration_time"],
            "tokens_per_second": res["tokens_per_second"],
            "simulated_iteration_time": res["simulated_iteration_time"],
            "measured_over_simulated": (res["iteration_time"] / res["simulated_iteration_time"]
                                        if res.get("simulated_iteration_time") else None),
            "peak_bytes": [st["peak_bytes"] for st in stages],
            "peak_source": sorted({st["peak_source"] for st in stages}),
            "planned_peak_bytes": [st.get("planned_peak_bytes") for st in stages],
            "processes": res.get("processes"), "breakdown": pipeline_breakdown(res), "swap": res["swap"]}


def gap_terms(res: dict, predicted: float) -> dict:
    """The run's measured iteration minus `predicted` (the plan's makespan), split into
    the terms of the module docstring (seconds; they sum to the total)."""
    meas, sim = res["timeline"], res["simulated_timeline"]
    n = len(meas["stages"])
    d_compute = sum(m["compute"] - s["compute"] for m, s in zip(meas["stages"], sim["stages"])) / n
    d_wait = sum(m["comm_wait"] - s["comm_wait"] for m, s in zip(meas["stages"], sim["stages"])) / n
    d_swap = sum(m["swap"] - s["swap"] for m, s in zip(meas["stages"], sim["stages"])) / n
    execution = meas["makespan"] - sim["makespan"]
    terms = {"costs": sim["makespan"] - predicted, "F/B": d_compute, "waits": d_wait,
             "bubbles": execution - d_compute - d_wait, "step": res["iteration_time"] - meas["makespan"]}
    return {"predicted": predicted, "measured": res["iteration_time"], "simulated_makespan": sim["makespan"],
            "measured_makespan": meas["makespan"], "terms": terms, "swap_busy_delta": d_swap,
            "total": res["iteration_time"] - predicted}


def speedup(obscura: dict, dapple_plus: dict, plan: dict) -> dict:
    """Obscura vs DAPPLE+: measured, predicted by the plan, simulated from each run's
    own costs; each term's share of the measured/predicted gap; the term off when the
    gap exceeds 5%."""
    p_o, p_d = plan["predicted_iteration_time"], plan["baselines"].get("dapple_plus")
    measured = dapple_plus["iteration_time"] / obscura["iteration_time"]
    same_run = dapple_plus["simulated_makespan"] / obscura["simulated_makespan"]
    out = {"measured": measured, "predicted": p_d / p_o if p_d else None, "simulated_same_run": same_run,
           "obscura": gap_terms(obscura, p_o), "dapple_plus": gap_terms(dapple_plus, p_d) if p_d else None,
           "gap": None, "contributions": None, "term_off": None}
    if not p_d:
        return out
    out["gap"] = measured / out["predicted"] - 1.0
    contrib = {t: _log_share(out["dapple_plus"], t) - _log_share(out["obscura"], t) for t in TERMS}
    out["contributions"] = contrib
    if abs(out["gap"]) > GAP:
        # The term that moved the speedup most, in the direction of the gap.
        same_sign = {t: c for t, c in contrib.items() if c * out["gap"] > 0} or contrib
        out["term_off"] = max(same_sign, key=lambda t: abs(same_sign[t]))
    return out


def _log_share(gap: dict, term: str) -> float:
    """Term's share of ln(measured / predicted) of one run (shares add up to it)."""
    if gap["total"] == 0:
        return 0.0
    return gap["terms"][term] / gap["total"] * math.log(gap["measured"] / gap["predicted"])


def swap_under_load(swap: dict, noswap: dict | None, one_gpu: dict | None) -> dict:
    """GB/s each way and fraction hidden with several GPUs swapping at once, beside the
    one-GPU run's figures (bench_engine.py's bench_gpu.json, obscura_swap_device_put)."""
    sw = swap["swap"]
    stages = [s for s, st in enumerate(swap["stages"]) if st.get("swap_blocks")]
    row = {k: sw.get(k) for k in ("bytes_out", "bytes_in", "measured_gbps_out", "measured_gbps_in",
                                  "standalone_gbps_out", "standalone_gbps_in", "overlap_with_compute")}
    row.update(swapping_stages=stages, iteration_time=swap["iteration_time"],
               noswap_iteration_time=noswap["iteration_time"] if noswap else None,
               hidden=_hidden_fraction(swap, noswap) if noswap else None, one_gpu=None)
    if one_gpu:
        ref = one_gpu["runs"].get("obscura_swap_device_put") or {}
        row["one_gpu"] = {k: (ref.get("swap") or {}).get(k) for k in
                          ("measured_gbps_out", "measured_gbps_in", "standalone_gbps_out", "standalone_gbps_in",
                           "overlap_with_compute")}
        row["one_gpu"]["fraction_hidden"] = (ref.get("hidden") or {}).get("fraction_hidden")
    return row


def report(out: Path, one_gpu_reference: Path | None = None) -> dict:
    """Everything above for the runs under `out`; writes out/bench_multi_gpu.json and
    out/table.md and returns the summary."""
    from schedules.formats.jsonio import write_json_atomic  # lazy: only when writing

    runs = load_runs(out)
    plans = json.loads((out / "plans" / "plans.json").read_text())
    one_gpu = None
    if one_gpu_reference is not None and (one_gpu_reference / "bench_gpu.json").exists():
        one_gpu = json.loads((one_gpu_reference / "bench_gpu.json").read_text())
    summary = {"plans": plans, "runs": {k: run_row(k, v) for k, v in runs.items()}, "speedups": {}, "swap": {}}
    for label, res in runs.items():
        m = _LABEL.fullmatch(label)
        if not m:
            continue
        mb, layout, name = m.groups()
        other = runs.get(f"m{mb}_{layout}_dapple_plus")
        if name == "obscura" and other is not None and mb in plans["plans"]:
            summary["speedups"][f"m{mb}_{layout}"] = speedup(res, other, plans["plans"][mb])
        if name == "swap" or (res["swap"].get("bytes_out") and name != "noswap"):
            twin = runs.get(f"m{mb}_{layout}_noswap") if name == "swap" else None
            summary["swap"][label] = swap_under_load(res, twin, one_gpu)
    write_json_atomic(out / "bench_multi_gpu.json", summary)
    (out / "table.md").write_text(markdown(summary))
    return summary


def _f(x, fmt: str = "{:.3f}") -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else fmt.format(x)


def markdown(summary: dict) -> str:
    """The tables for BENCHMARKS.md "Multi-GPU".
    Long: three tables (runs, speedups, swap), each a header and one line per row."""
    gib = 2 ** 30
    lines = ["| m | layout | run | iteration (s) | tokens/s | measured / simulated | F, B in pipeline / standalone "
             "| peak per stage (GiB) | Gantt |", "|---|---|---|---|---|---|---|---|---|"]
    for label, r in summary["runs"].items():
        m = _LABEL.fullmatch(label)
        mb, layout, name = m.groups() if m else ("?", "?", label)
        b = r["breakdown"] or {}
        peaks = ", ".join(f"{x / gib:.1f}" if x >= gib / 10 else format_bytes(x, 1) for x in r["peak_bytes"])
        src = "" if r["peak_source"] == ["memory_stats"] else " (accounting)"
        lines.append(f"| {mb} | {LAYOUT_NAMES.get(layout, layout)} | {name} | {_f(r['iteration_time'], '{:.4f}')} "
                     f"| {_f(r['tokens_per_second'], '{:,.0f}')} | {_f(r['measured_over_simulated'])} "
                     f"| {_f(b.get('F_pipeline_over_standalone'))}, {_f(b.get('B_pipeline_over_standalone'))} "
                     f"| {peaks}{src} | gantt/{label}.png |")
    lines += ["", "| m | layout | Obscura vs DAPPLE+ measured | planner predicted | simulated from the runs' costs "
              "| measured / predicted | term off (> 5%) |", "|---|---|---|---|---|---|---|"]
    for key, s in summary["speedups"].items():
        mb, layout = key[1:].split("_", 1)
        off = "-"
        if s["term_off"]:
            off = f"{s['term_off']}: {TERMS[s['term_off']]} ({s['contributions'][s['term_off']]:+.1%})"
        lines.append(f"| {mb} | {LAYOUT_NAMES.get(layout, layout)} | {_f(s['measured'])}x | {_f(s['predicted'])}x "
                     f"| {_f(s['simulated_same_run'])}x | {_f(s['gap'], '{:+.1%}')} | {off} |")
    lines += ["", "| run | swapping stages | GB/s out / in (in run) | standalone GB/s out / in | overlap "
              "| fraction hidden | one GPU: in run, standalone, hidden |", "|---|---|---|---|---|---|---|"]
    for label, w in summary["swap"].items():
        o = w["one_gpu"] or {}
        one = (f"{_f(o.get('measured_gbps_out'), '{:.1f}')} / {_f(o.get('measured_gbps_in'), '{:.1f}')}, "
               f"{_f(o.get('standalone_gbps_out'), '{:.1f}')} / {_f(o.get('standalone_gbps_in'), '{:.1f}')}, "
               f"{_f(o.get('fraction_hidden'), '{:.0%}')}") if o else "-"
        lines.append(f"| {label} | {', '.join(map(str, w['swapping_stages']))} "
                     f"| {_f(w['measured_gbps_out'], '{:.3g}')} / {_f(w['measured_gbps_in'], '{:.3g}')} "
                     f"| {_f(w['standalone_gbps_out'], '{:.3g}')} / {_f(w['standalone_gbps_in'], '{:.3g}')} "
                     f"| {_f(w['overlap_with_compute'], '{:.0%}')} "
                     f"| {_f((w['hidden'] or {}).get('fraction_hidden'), '{:.0%}')} | {one} |")
    return "\n".join(lines) + "\n"
