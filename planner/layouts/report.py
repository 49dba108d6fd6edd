"""Human and machine output of a sweep: the ranked table, the trend lines the
layouts paper draws its conclusions from, and the CSV."""
from __future__ import annotations

import csv
import os

from models.units import count_params
from planner.layouts.sweep import ANALYTIC, SCALED, SweepResult
from schedules.formats.jsonio import replace_atomically
from schedules.sizes import GiB, format_bytes, format_seconds

CSV_FIELDS = ("rank", "fits", "runnable", "mfu", "label", "micro_batch", "tp", "pp", "sp", "dp",
              "num_microbatches", "policy", "attention", "cost_source", "memory_per_gpu_gib",
              "weights_gib", "activations_gib", "transient_gib", "worst_stage",
              "iteration_time_s", "pipeline_time_s", "dp_exposed_s", "bubble_fraction",
              "tokens_per_second")


def _source_line(r: SweepResult) -> str:
    if r.measured_path is None:
        return "layer costs: analytic roofline (no measured layer file)"
    used = {x.source for x in r.results}
    kinds = ", ".join(sorted(used))
    return f"layer costs: {kinds} (measured file {r.measured_path}, {r.measured_device})"


def header(r: SweepResult) -> list[str]:
    hw, g, dev = r.hardware, r.grid, r.hardware.device
    return [
        f"obscura sweep: {r.cfg.name} ({_count(count_params(r.cfg))} params), seq {r.seq_len}, "
        f"{g.gpus} GPUs, global batch {g.global_batch} ({_count(g.global_batch * r.seq_len)} tokens)",
        f"model FLOPs/token {_count(r.flops_per_token)} (6N + 12LHQT); MFU against "
        f"{dev.peak_flops / 1e12:.0f} TFLOP/s ({dev.name}); memory {hw.gpu_memory / GiB:.1f} GiB/GPU "
        f"({hw.memory_reserve / GiB:.1f} reserved)",
        f"{r.state.describe()}; rates: matmul {dev.matmul_flops / 1e12:.0f}, flash attention "
        f"{dev.flash_attention_flops / 1e12:.0f} TFLOP/s, HBM {dev.hbm_bandwidth / 1e12:.2f} TB/s, "
        f"NVLink {hw.nvlink_bandwidth / 1e9:.0f} GB/s, inter-node {hw.internode_bandwidth / 1e9:.0f} GB/s",
        _source_line(r) + "; pipeline: schedules.simulate(1f1b)",
        f"{len(r.results)} layouts evaluated, {len(r.fitting)} fit, "
        f"{len(r.skipped)} (mbs, TP, PP) combinations skipped by divisibility",
        f"{sum(x.runnable for x in r.fitting)} fitting layouts the model registry can shard "
        f"(run one: obscura train --layout SWEEP.json:#)" + _not_runnable(r),
    ]


def _count(n: float) -> str:
    """13.02B, 4.194M, 70.4k, 512: four significant digits."""
    for unit, size in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= size:
            return f"{n / size:.4g}{unit}"
    return f"{n:.4g}"


def _not_runnable(r: SweepResult) -> str:
    reasons = sorted({x.not_runnable for x in r.fitting if not x.runnable})
    return f"; the others: {reasons[0]}" + (f" (and {len(reasons) - 1} more)" if len(reasons) > 1 else "") \
        if reasons else ""


def _source(source: str) -> str:
    if source == ANALYTIC:
        return "analytic"
    if source == SCALED:
        return "analytic, scaled to measured"
    return f"{source} layer costs"


def table(r: SweepResult, top: int = 20) -> list[str]:
    lines = [f"{'#':>3} {'MFU':>6}  {'mbs/TP/PP/SP':<12} {'DP':>3} {'m':>5}  {'policy':<9} "
             f"{'attn':<5} {'mem/GPU':>10} {'iter':>9} {'bubble':>6}  source"]
    for i, x in enumerate(r.fitting[:top], 1):
        lo = x.layout
        lines.append(f"{i:>3} {_pct(x.mfu):>6}  {lo.label:<12} {lo.dp:>3} {lo.num_microbatches:>5}  "
                     f"{lo.policy:<9} {lo.attention:<5} {format_bytes(x.memory.total):>10} "
                     f"{format_seconds(x.time.total):>9} {_pct(x.time.bubble_fraction):>6}  "
                     f"{_source(x.source)}{'' if x.runnable else ' (not runnable)'}")
    return lines


def _pct(share: float) -> str:
    """'69.1%', and a share too small for one decimal in the decimals that show it."""
    pct = share * 100
    if pct == 0 or pct >= 0.1:
        return f"{pct:.1f}%"
    return f"{pct:.2g}%"


def trends(r: SweepResult) -> list[str]:
    """Best MFU along each axis the layouts paper discusses."""
    fit = r.fitting
    if not fit:
        return []

    def best(pred):
        xs = [x for x in fit if pred(x.layout)]
        return max(xs, key=lambda x: x.mfu) if xs else None

    def fmt(name, x):
        return f"{name} {x.mfu * 100:.1f}% ({x.layout.label} {x.layout.policy} {x.layout.attention})" \
            if x else f"{name} -"

    g = r.grid
    out = ["best by micro-batch: " + "; ".join(fmt(f"mbs {b}", best(lambda l, b=b: l.micro_batch == b))
                                            for b in g.micro_batches),
           "best by recompute:   " + "; ".join(fmt(p, best(lambda l, p=p: l.policy == p))
                                            for p in g.policies),
           "best by attention:   " + "; ".join(fmt(a, best(lambda l, a=a: l.attention == a))
                                            for a in g.attentions),
           "best by parallelism: " + "; ".join(
               [fmt("TP 1 (PP only)", best(lambda l: l.tp == 1)),
                fmt("TP > 1", best(lambda l: l.tp > 1)),
                fmt("PP 1", best(lambda l: l.pp == 1))])]
    if any(t > 1 for t in g.tps):
        out.append("sequence parallel:   " + "; ".join(
            [fmt("TP>1 SP on", best(lambda l: l.tp > 1 and l.sp)),
             fmt("TP>1 SP off", best(lambda l: l.tp > 1 and not l.sp))]))
    return out


def csv_rows(r: SweepResult) -> list[dict]:
    rows = []
    rank = 0
    for x in r.results:
        lo, t = x.layout, x.time
        if x.fits:
            rank += 1
        rows.append({
            "rank": rank if x.fits else "", "fits": x.fits, "runnable": x.runnable,
            "mfu": f"{x.mfu:.5f}" if x.fits else "", "label": lo.label,
            "micro_batch": lo.micro_batch, "tp": lo.tp, "pp": lo.pp, "sp": lo.sp, "dp": lo.dp,
            "num_microbatches": lo.num_microbatches, "policy": lo.policy, "attention": lo.attention,
            "cost_source": x.source, "memory_per_gpu_gib": f"{x.memory.total / GiB:.3f}",
            "weights_gib": f"{x.memory.weights / GiB:.3f}",
            "activations_gib": f"{x.memory.activations / GiB:.3f}",
            "transient_gib": f"{x.memory.transient / GiB:.3f}", "worst_stage": x.worst_stage,
            "iteration_time_s": f"{t.total:.5f}" if t else "",
            "pipeline_time_s": f"{t.pipeline:.5f}" if t else "",
            "dp_exposed_s": f"{t.dp_exposed:.5f}" if t else "",
            "bubble_fraction": f"{t.bubble_fraction:.5f}" if t else "",
            "tokens_per_second": f"{x.tokens_per_second:.1f}" if t else ""})
    return rows


def write_csv_atomic(path: str | os.PathLike, r: SweepResult) -> None:
    """Write the CSV atomically (schedules.formats.jsonio.replace_atomically)."""
    rows = csv_rows(r)

    def write(tmp: str) -> None:
        with open(tmp, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=CSV_FIELDS)
            w.writeheader()
            w.writerows(rows)
    replace_atomically(path, write)
