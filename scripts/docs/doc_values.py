"""The figures the docs quote in prose, each read from the committed results file it
comes from (scripts/docs/doc_numbers.py renders them into `<!-- value: NAME -->`
markers; readers in scripts/docs/doc_sources.py), and NOT_RESULTS: the numbers in prose
that are not results, each with the reason.

A value is a function returning the text the doc shows. When a results file is
regenerated, `python scripts/docs/doc_numbers.py --write` rewrites every figure; one
whose source lost its column or row fails there, naming the value."""
from __future__ import annotations

from doc_sources import (GiB, benchmarks, fig12, fig12_obscura, fig13, fig14, fig16, gbs_list, json_file,
                         layer_fwd, layer_kept, profile, profile_session, rows, share, span, stage_mfu,
                         stage_span, sweep_best, unit, zoo)

CMB = ("attn_norm", "mlp_norm", "mlp_act", "mlp_mul")      # the CMB set of the Llama-2 profile
FAM = ("llama2", "gpt3")
AN = "results/figures/analytic_h200"
AN_A100 = "results/figures/analytic_a100"


def _ms(x: float) -> str:
    return f"{x * 1e3:.3f}"


def _pct(x: float, places: int = 0) -> str:
    return f"{100 * x:.{places}f}%"


def _shares(family: str, size: str, where: str = "results/figures") -> list[float]:
    return [share(r) for r in fig12_obscura(family, size, where=where)]


def _ablation_change(model: str, where: str) -> str:
    """What CMB-Identifying does to each GBS over partition adjustment (speedup over
    DAPPLE+ (unit)): 'helps at GBS 32 (1.177 -> 1.186), costs at GBS 16 (...) ...'."""
    before, after = fig16(model, "partition", where), fig16(model, "cmb", where)
    parts = {"helps": [], "costs": [], "changes nothing": []}
    for b in sorted(before):
        x, y = float(before[b]["speedup_vs_dapple_plus"]), float(after[b]["speedup_vs_dapple_plus"])
        key = "changes nothing" if f"{x:.3f}" == f"{y:.3f}" else ("helps" if y > x else "costs")
        parts[key].append(f"{b} ({x:.3f} -> {y:.3f})")
    said = [f"{k} at GBS " + ", ".join(v) for k, v in parts.items() if v]
    return "; ".join(said)


def _relaxed_gbs(model: str, where: str) -> str:
    steps = fig16(model, "swap_recompute", where)
    relaxed = [b for b, r in steps.items() if r["order"] not in ("strawman", "recomp")]
    return "every GBS" if len(relaxed) == len(steps) else (gbs_list(relaxed) if relaxed else "no GBS")


def _layer_points() -> str:
    """How many points more every ablation step gains against DAPPLE+ (layer)."""
    diffs = [100 * (float(r["speedup_vs_dapple_plus_layer"]) - float(r["speedup_vs_dapple_plus"]))
             for r in rows("results/figures/fig16_ablation.csv") if r["speedup_vs_dapple_plus"]]
    return span(diffs)


ZOO_MODELS = ("llama2-28b", "gpt3-28b")


def _zoo(system: str, key: str, gbs_set=(16, 32, 64), fitting: bool = False) -> list[float]:
    """`key` of `system` in every fig_zoo case (`fitting`: only where it fits)."""
    got = [zoo(m, b, system) for m in ZOO_MODELS for b in gbs_set]
    return [float(r[key]) for r in got if r["fits"] == "True" or not fitting]


def _zoo_behind_pick(system: str) -> list[float]:
    """How much slower `system` runs than the planner's pick, in %, in every case."""
    return [100 * (float(zoo(m, b, system)["iteration_s"]) / float(zoo(m, b, "pick")["iteration_s"]) - 1)
            for m in ZOO_MODELS for b in (16, 32, 64)]


VALUES = {
    # ---- docs/reproduction.md: what the profiles price ----
    "prof.session": lambda: profile_session() + "/",
    **{f"prof.{f}.{k}.{what}": (lambda f=f, k=k, key=key: _ms(unit(f, k)[key]))
       for f in FAM for k in ("attn", "mlp") for what, key in (("full_ms", "full_recompute_time"), ("fwd_ms", "fwd_time"))},
    **{f"prof.{f}.layer_ms": (lambda f=f: _ms(profile(f)["layer_recompute_time"])) for f in FAM},
    **{f"prof.{f}.layer_fwd_ms": (lambda f=f: _ms(layer_fwd(f))) for f in FAM},
    **{f"prof.{f}.layer_share": (lambda f=f: _pct(profile(f)["layer_recompute_time"] / layer_fwd(f))) for f in FAM},
    "prof.full_share": lambda: _pct(sum(unit("llama2", k)["full_recompute_time"] for k in ("attn", "mlp"))
                                    / layer_fwd("llama2")),
    "prof.kept_none_mib": lambda: f"{layer_kept('llama2') / 2**20:.0f} MiB",
    "prof.kept_cmb_mib": lambda: f"{layer_kept('llama2', CMB) / 2**20:.0f}",
    "prof.cmb_saving": lambda: _pct(1 - layer_kept("llama2", CMB) / layer_kept("llama2")),
    "prof.layer_weight_gib": lambda: f"{(unit('llama2', 'attn')['weight_bytes'] + unit('llama2', 'mlp')['weight_bytes']) / GiB:.1f} GiB",
    "prof.p2p_gbs": lambda: f"{profile('llama2')['p2p_bandwidth'] / 1e9:.0f} GB/s",
    "prof.wgrad_gib": lambda: f"{(unit('llama2', 'attn')['weight_grad_bytes'] + unit('llama2', 'mlp')['weight_grad_bytes']) / GiB:.2f} GiB",
    "prof.wgrad_mib": lambda: f"{(unit('llama2', 'attn')['weight_grad_bytes'] + unit('llama2', 'mlp')['weight_grad_bytes']) / 2**20:.0f} MiB",
    **{f"prof.wgrad_{k}_mib": (lambda k=k: f"{unit('llama2', k)['weight_grad_bytes'] / 2**20:.0f}") for k in ("attn", "mlp")},
    "prof.wgrad_rederive_mib": lambda: f"{(unit('llama2', 'attn')['weight_grad_rederive_bytes'] + unit('llama2', 'mlp')['weight_grad_rederive_bytes']) / 2**20:.0f}",
    "prof.wgrad_8x11_gib": lambda: f"{8 * 11 * (unit('llama2', 'attn')['weight_grad_bytes'] + unit('llama2', 'mlp')['weight_grad_bytes']) / GiB:.0f} GiB",
    "yard.profile_ms": lambda: f"{json_file(profile_session() + '/session.json')['layer_recompute']['profile_s'] * 1e3:.3f} ms",
    "yard.per_layer_ms": lambda: f"{json_file(profile_session() + '/session.json')['layer_recompute']['yardstick_per_layer_s'] * 1e3:.3f} ms",
    "yard.ratio": lambda: f"{json_file(profile_session() + '/session.json')['layer_recompute']['profile_over_yardstick']:.3f}",
    "yard.session": lambda: profile_session() + "/session.json",
    "yard.share": lambda: _pct(json_file(profile_session() + "/layer_yardstick.json")["recompute_share_of_fwd"]),
    **{f"diag.engine{n}_ms": (lambda n=n: (lambda d: f"{(d['layer']['bwd'] - d['none']['bwd']) / n * 1e3:.3f}")(
        json_file("results/h200/profile_v3/diag_layer.json")[f"engine_{n}"])) for n in (1, 5)},
    **{f"diag.yard{n}_ms": (lambda n=n: f"{json_file('results/h200/profile_v3/diag_layer.json')[f'yard_{n}']['recompute_per_layer_s'] * 1e3:.3f}")
       for n in (1, 5)},
    # ---- Fig. 5 ----
    "fig05.recomp_all": lambda: f"+{float(row_('fig05_bubbles', config='Recomp-All')['overhead_pct']):.0f}%",
    # ---- Fig. 12 ----
    **{f"fig12.{f}.{s}.share": (lambda f=f, s=s: span([100 * x for x in _shares(f, s)], unit="%"))
       for f in FAM for s in ("18b", "23b", "28b")},
    **{f"fig12.{s}.share": (lambda s=s: span([100 * x for f in FAM for x in _shares(f, s)], unit="%")) for s in ("18b", "23b")},
    "fig12.llama2.28b.shares": lambda: " / ".join(f"{100 * x:.0f}%" for x in _shares("llama2", "28b")),
    "fig12.llama2.28b.gbs": lambda: " / ".join(r["global_batch"] for r in fig12_obscura("llama2", "28b")),
    **{f"fig12.{f}.28b.lost": (lambda f=f: span([100 * (1 - x) for x in _shares(f, "28b")], unit="%")) for f in FAM},
    "fig12.analytic_ceiling": lambda: span([float(r["ceiling_vs_dapple_plus"]) for r in rows(
        f"{AN}/fig12_throughput.csv", system="obscura") if r["ceiling_vs_dapple_plus"]], "{:.2f}", "x"),
    **{f"fig12.{f}.18b.peak_1f1b": (lambda f=f: f"{float(fig12(f'{f}-18b', 16, 'dapple')['max_stage_peak_gib']):.1f} GiB")
       for f in FAM},
    **{f"fig12.{f}.23b.peak_ohp": (lambda f=f: f"{float(fig12(f'{f}-23b', 16, 'ohp_cmb')['max_stage_peak_gib']):.1f} GiB")
       for f in FAM},
    "fig12.23b.below_ceiling": lambda: span([100 * (float(r["ceiling_vs_dapple_plus"]) / float(r["speedup_vs_dapple_plus"]) - 1)
                                             for f in FAM for r in fig12_obscura(f, "23b")], "{:.1f}", "%").split("-")[-1],
    "fig12.an_a100.llama2.28b": lambda: span([float(r["speedup_vs_dapple_plus"]) for r in fig12_obscura(
        "llama2", "28b", where=AN_A100)], "{:.3f}", "x"),
    "fig12.an_h200.llama2.28b": lambda: span([float(r["speedup_vs_dapple_plus"]) for r in fig12_obscura(
        "llama2", "28b", where=AN)], "{:.3f}", "x"),
    "fig12.h200.dapple_peak": lambda: f"{max(float(r['max_stage_peak_gib']) for r in rows('results/figures/fig12_throughput.csv', system='dapple') if r['memory_limit_gib'] != '80'):.1f} GiB",
    # ---- calibration ----
    "cal.within": lambda: f"{max(abs(1 - r['measured_over_calibrated']) for r in json_file('results/h200/calibration.json')['fit']) * 100:.1f}%",
    # ---- Fig. 13 (28B, GBS 32) ----
    "fig13.weights": lambda: span([float(r["weights_gib"]) for m in ("llama2-28b", "gpt3-28b")
                                   for r in fig13(m, "dapple")], unit=" GiB"),
    "fig13.budget": lambda: span([80 - float(r["weights_gib"]) for m in ("llama2-28b", "gpt3-28b")
                                  for r in fig13(m, "dapple")], unit=" GiB"),
    **{f"fig13.{f}.overflow": (lambda f=f: stage_span(r["stage"] for r in fig13(f"{f}-28b", "dapple") if r["fits"] == "False"))
       for f in FAM},
    **{f"fig13.{f}.dapple_stage{s}": (lambda f=f, s=s: f"{float(fig13(f'{f}-28b', 'dapple')[s]['peak_gib']):.1f}")
       for f in FAM for s in (0, 1)},
    "fig13.unused": lambda: span([80 - float(r["peak_gib"]) for m in ("llama2-28b", "gpt3-28b")
                                  for r in fig13(m, "dapple_plus")], unit=" GiB"),
    **{f"fig13.{f}.swaps": (lambda f=f: ", ".join(r["swap_blocks"] for r in fig13(f"{f}-28b", "obscura") if r["swap_blocks"] != "0"))
       for f in FAM},
    **{f"fig13.{f}.swap_stages": (lambda f=f: stage_span(r["stage"] for r in fig13(f"{f}-28b", "obscura") if r["swap_blocks"] != "0"))
       for f in FAM},
    **{f"fig13.{f}.cmb_stages": (lambda f=f: stage_span(r["stage"] for r in fig13(f"{f}-28b", "obscura")
                                                          if r["swap_blocks"] == "0" and r["recompute"] != "-")) for f in FAM},
    "fig13.strawman_stage": lambda: str(next(int(r["stage"]) for r in fig13("llama2-28b", "strawman") if r["recompute"] == "-")),
    "fig13.strawman_above": lambda: (lambda s: f"{float(fig13('llama2-28b', 'strawman')[s]['peak_gib']) - float(fig13('llama2-28b', 'dapple')[s]['peak_gib']):.1f} GiB")(
        next(int(r["stage"]) for r in fig13("llama2-28b", "strawman") if r["recompute"] == "-")),
    # ---- Fig. 14 (23B, GBS 32) ----
    "fig14.dp.recompute": lambda: f"{float(fig14('llama2-23b', 'dapple_plus')[0]['recompute_s']):.3f} s",
    "fig14.dp.compute": lambda: f"{float(fig14('llama2-23b', 'dapple_plus')[0]['compute_s']):.3f} s",
    **{f"fig14.{f}.strawman_stages": (lambda f=f: stage_span(r["stage"] for r in fig14(f"{f}-23b", "strawman") if float(r["recompute_s"]) > 0))
       for f in FAM},
    "fig14.bubble": lambda: f"{float(fig14('llama2-23b', 'dapple_plus')[0]['bubble_s']):.3f} -> {float(fig14('llama2-23b', 'strawman')[0]['bubble_s']):.3f} s",
    "fig14.iteration": lambda: f"{float(fig14('llama2-23b', 'dapple_plus')[0]['makespan_s']):.3f} -> {float(fig14('llama2-23b', 'strawman')[0]['makespan_s']):.3f} s",
    **{f"fig14.{f}.vs_strawman": (lambda f=f: _pct(float(fig14(f"{f}-23b", "strawman")[0]["makespan_s"])
                                                    / float(fig14(f"{f}-23b", "obscura")[0]["makespan_s"]) - 1, 1)) for f in FAM},
    "fig16.23b.cmb_off_adjusted": lambda: stage_span(fig16("llama2-23b", "relaxation")[32]["adjusted"].split()),
    # ---- Fig. 16 ----
    "fig16.fig6_case": lambda: benchmarks(r"strawman's [\d.]+ \((-[\d.]+%)\)"),
    **{f"fig16.strawman.{w}": (lambda where=where: " -> ".join(
        f"{float(r['speedup_vs_dapple_plus']):.2f}x" for b, r in sorted(fig16("llama2-23b", "strawman", where).items())
        if b in (16, 128))) for w, where in (("measured", "results/figures"), ("analytic", AN))},
    "fig16.ohp_vs_dapple": lambda: _pct(float(fig12("llama2-18b", 32, "dapple", where=AN)["iteration_s"])
                                        / float(fig12("llama2-18b", 32, "ohp_cmb", where=AN)["iteration_s"]) - 1, 1),
    **{f"fig16.28b.swap_share.{w}": (lambda where=where, fmt=fmt: span(
        [100 * float(r["speedup_vs_dapple_plus"]) / float(fig16("llama2-28b", "ceiling", where)[b]["speedup_vs_dapple_plus"])
         for b, r in fig16("llama2-28b", "swap_recompute", where).items()], fmt, "%"))
       for w, where, fmt in (("measured", "results/figures", "{:.1f}"), ("analytic", AN, "{:.0f}"))},
    "fig16.28b.relaxed.measured": lambda: _relaxed_gbs("llama2-28b", "results/figures"),
    "fig16.28b.relaxed.analytic": lambda: _relaxed_gbs("llama2-28b", AN),
    "fig16.28b.partition_adjusted": lambda: stage_span(fig16("llama2-28b", "partition")[32]["adjusted"].split()),
    "fig16.28b.obscura_adjusted": lambda: stage_span(fig16("llama2-28b", "cmb")[32]["adjusted"].split()),
    "fig16.28b.cmb.measured": lambda: _ablation_change("llama2-28b", "results/figures"),
    "fig16.28b.cmb.analytic": lambda: _ablation_change("llama2-28b", AN),
    "fig16.layer_points": _layer_points,
    # ---- today's schedules (fig_zoo) ----
    "zoo.pick_speedup": lambda: span(_zoo("pick", "speedup_vs_dapple_plus"), "{:.2f}", "x"),
    "zoo.obscura_speedup": lambda: span(_zoo("obscura", "speedup_vs_dapple_plus"), "{:.2f}", "x"),
    "zoo.obscura_behind": lambda: span(_zoo_behind_pick("obscura"), "{:.1f}", "%"),
    "zoo.zb_h1_speedup": lambda: span([float(zoo("llama2-28b", b, "family:zb-h1")["speedup_vs_dapple_plus"])
                                       for b in (16, 32, 64)], "{:.2f}", "x"),
    "zoo.zb_h1_needs_gpt3": lambda: span([float(zoo("gpt3-28b", b, "family:zb-h1")["needs_gib"]) for b in (16, 32, 64)],
                                         "{:.1f}", " GiB"),
    "zoo.zb_v_needs": lambda: span(_zoo("family:zb-v", "needs_gib"), unit=" GiB"),
    "zoo.zb_v_unlimited": lambda: span(_zoo("family:zb-v", "unlimited_s", (32,)), "{:.2f}", " s"),
    "zoo.pick_unlimited": lambda: span(_zoo("family:interleaved-v4", "unlimited_s", (32,)), "{:.2f}", " s"),
    # ---- stage MFU (results/h200/stage_mfu.json) ----
    **{f"mfu.{a}.{p}.ms": (lambda a=a, p=p: f"{stage_mfu(a, p)['fwd_bwd_s'] * 1e3:.2f} ms")
       for a in ("cudnn", "xla") for p in ("none", "cmb", "mlp", "full")},
    **{f"mfu.cudnn.{p}.vs_none": (lambda p=p: f"{100 * (stage_mfu('cudnn', p)['fwd_bwd_s'] / stage_mfu('cudnn', 'none')['fwd_bwd_s'] - 1):+.1f}%")
       for p in ("cmb", "mlp", "full")},
    **{f"mfu.resid.{p}_mb": (lambda p=p: f"{stage_mfu('cudnn', p)['residual_bytes_per_layer'] / 1e6:.0f}") for p in ("none", "cmb")},
    # ---- layout sweeps (results/sweeps) ----
    **{f"sweep.13b2k.{c}.mbs": (lambda c=c: " / ".join(f"{100 * float(sweep_best('llama2-13b', 2, c, micro_batch=b)['mfu']):.1f}"
                                                        for b in (1, 2, 4)) + "%") for c in ("analytic", "measured")},
    **{f"sweep.13b2k.{c}.tp{t}": (lambda c=c, t=t: f"{100 * float(sweep_best('llama2-13b', 2, c, tp=t)['mfu']):.1f}%")
       for c in ("analytic", "measured") for t in (1, 2)},
    **{f"sweep.13b{k}k.measured.{a}": (lambda k=k, a=a: f"{100 * float(sweep_best('llama2-13b', k, 'measured', attention=a)['mfu']):.1f}%")
       for k in (2, 8) for a in ("xla", "cudnn")},
    "sweep.tie": lambda: f"{100 * abs(float(sweep_best('llama2-13b', 2, 'measured', tp=1)['mfu']) - float(sweep_best('llama2-13b', 2, 'measured', tp=2)['mfu'])):.1f}",
    "sweep.bench_tp_moved": lambda: benchmarks(r"TP > 1 rows moved by at most [\d.]+ MFU points \(analytic\) and ([\d.]+) \(measured\)"),
    "sweep.bench_30b2k": lambda: benchmarks(r"30B 2k measured ([\d.]+% -> [\d.]+%)"),
    "sweep.per_token": lambda: benchmarks(r"a 13B layer at mbs 4 is\s+(\d+%)\s+cheaper"),
    # ---- docs/design.md: memory on a device (the one-GPU engine runs) ----
    "design.1f1b_peak": lambda: f"{_engine('v6', '1f1b')['stages'][0]['device_peak_bytes'] / GiB:.2f} GiB",
    "design.weights": lambda: f"{sum(st['weight_bytes'] for st in _engine('v6', '1f1b')['stages']) / GiB:.2f}",
    "design.1f1b_scratch": lambda: f"{max(st['temp_bytes'] for st in _engine('v6', '1f1b')['stages']) / GiB:.2f}",
    "design.zb_mid_scratch": lambda: f"{_engine('v6', 'zb_h1')['stages'][1]['temp_bytes'] / GiB:.2f}",
    "design.recomp_peak": lambda: f"{_engine('v3', 'recomp_all')['stages'][0]['device_peak_bytes'] / GiB:.2f} GiB",
    "design.last_resid": lambda: f"{_engine('v6', '1f1b')['stages'][-1]['residual_bytes_per_microbatch'] / GiB:.2f}",
    # ---- docs/cli.md ----
    "cli.zbh1_makespan": lambda: f"{_unit_cost_makespan('zb-h1', 4, 8, fwd=1.0, bwd=2.0, input_grad=1.0, weight_grad=1.0):g}",
    # ---- docs/formats.md ----
    "formats.full_share": lambda: _pct(sum(unit("llama2", k)["full_recompute_time"] for k in ("attn", "mlp")) / layer_fwd("llama2")),
    # ---- docs/multiprocess.md ----
    **{f"mp.limit.p{p}": (lambda p=p: f"{json_file(f'results/h200x{p}/plans/plans.json')['plans'][min(json_file(f'results/h200x{p}/plans/plans.json')['plans'], key=int)]['memory_limit'] / GiB:.1f} GiB")
       for p in (4, 8)},
    "mp.swap_gbs": lambda: (lambda s: f"{s['standalone_gbps_out']:.1f} / {s['standalone_gbps_in']:.1f} GB/s")(
        json_file("results/h200/engine_v2/gpu_obscura_swap_device_put.json")["swap"]),
    "mp.cross_process": lambda: benchmarks(r"A cross-process transfer costs ~(\d+x) an in-process one"),
    "mp.swap_hidden": lambda: benchmarks(r"in-run [\d.]+/[\d.]+ GB/s with \d+% overlap, (\d+%) of swap time hidden"),
}


def _unit_cost_makespan(name: str, p: int, m: int, fwd: float, bwd: float, input_grad: float,
                        weight_grad: float) -> float:
    """What `obscura simulate --schedule NAME --stages P --microbatches M --fwd .. --bwd ..
    --input-grad-time .. --weight-grad-time ..` prints as the makespan."""
    from schedules import StageCosts, generate, simulate  # lazy: only this value simulates
    costs = StageCosts.uniform(p, fwd=fwd, bwd=bwd, input_grad=(input_grad,) * p, weight_grad=(weight_grad,) * p)
    return simulate(generate(name, p, m, costs=costs), costs).makespan


def _engine(version: str, run: str) -> dict:
    return json_file(f"results/h200/engine_{version}/gpu_{run}.json")


def row_(fig: str, **match) -> dict:
    return rows(f"results/figures/{fig}.csv", **match)[0]


WHOLE_PAGE = "*"      # NOT_RESULTS[doc] = (WHOLE_PAGE, reason): nothing on the page is a result of ours
INPUT = "an input: a limit, a device's rate or size, a setting, a flag's value"
PAPER = "the paper's own figure, quoted"
TIMEOUT = "a watchdog's or launcher's time limit (a setting, obscura_jax/processes)"
NOT_RESULTS: dict = {
    "docs/obscura.md": (WHOLE_PAGE, "the Obscura paper restated: every figure is the paper's"),
    "README.md": {"10x": "hypothesis's thorough profile runs 10x the examples (a setting)"},
    "docs/cli.md": {**dict.fromkeys(("360 GB/s", "45 GB/s"), "the link rates collectives are priced at (inputs)"),
                    **dict.fromkeys(("80GiB", "85.9GB", "2GiB", "24GiB", "141GB"), "a flag's example value"),
                    "3%": "the memory check's allocator share (a setting)",
                    "256 MiB": "the JSON reader's size cap (a setting)",
                    "3x": "the vocabulary-to-hidden ratio under which --head-weight-grad auto runs the head's W at once (a setting)",
                    **dict.fromkeys(("6x", "10x"), "Llama-2-13B's and GPT-3 13B's vocabulary over hidden size (model configs)"),
                    "75%": "XLA's default memory fraction (a setting)",
                    "0.01": "adamw's default weight decay (a setting)",
                    "3.36": "the H200's HBM rate the sweep assumes (planner/device.py, an input)",
                    "1.00": "what a meas/sim ratio of one means (a definition)"},
    "docs/design.md": {"3%": "the memory check's allocator share (a setting)",
                       **dict.fromkeys(("1.9%", "2.05%"), "what the 95% run held over its counted buffers "
                                                          "(results/h100/gpu_tier, BENCHMARKS.md)"),
                       "95%": "the fill the GPU test admits its run at (a setting)",
                       "128 MiB": "the BFC allocator's split threshold (XLA's, a constant)"},
    "docs/formats.md": {"2.13": "torch's version the goldens were built with",
                        "256 MiB": "the JSON reader's size cap (a setting)"},
    "docs/layouts.md": {**dict.fromkeys(("37.9%", "43.1%", "55.6%", "70.6%", "62.8%", "62.0%", "60.2%", "59.6%",
                                         "63.0%", "49.8%"), "the layouts paper's MFU, quoted"),
                        "2311.05610": "the paper's arXiv id",
                        "989 TFLOP/s": "the H200's peak (the MFU denominator, an input)",
                        "789 TFLOP/s": "the 8192^3 matmul rate of the device notes (the analytic model's input)"},
    "docs/multiprocess.md": {**dict.fromkeys(("4 s", "20 s", "15 s", "30 s", "600 s", "3 s", "120 s", "90 s"), TIMEOUT),
                             "50 ms": "the launcher's poll interval (a setting)",
                             **dict.fromkeys(("0.001", "0 s", "1 s"), "an environment variable's value and the watchdog's "
                                             "look interval (settings)"),
                             "5%": "the report's threshold for naming the term that is off (a setting)"},
    "docs/reproduction.md": {
        **dict.fromkeys(("8x", "1.33x", "0.50 s", "0.37 s", "22-27%", "29-31%", "37.9%", "70.6%"), PAPER),
        **dict.fromkeys(("80 GiB", "141 GB", "143771 MiB", "140.4 GiB", "75%", "112.6 GB", "104.9 GiB"),
                        "a memory limit planned for, or the H200's memory and XLA's default share of it (inputs)"),
        **dict.fromkeys(("4x", "989 TFLOP/s", "80%", "60%", "2x", "25 GB/s", "3x", "45 GB/s"),
                        "the analytic devices' rates and ratios between them (planner/device.py, inputs)"),
        "2 s": "the load CostTiming runs before timing (a setting)",
        "100%": "the whole forward (a definition)",
        **dict.fromkeys(("64%", "3%"), "the stage-MFU target (a requirement, not a result)")},
}
