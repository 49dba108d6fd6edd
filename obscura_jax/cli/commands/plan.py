"""obscura plan: a profile + a memory limit -> an Obscura plan (obscura-plan/1),
printed as a table with the simulated comparison against the baselines."""
from __future__ import annotations

import models
from schedules.calibration import load_calibration
from schedules.simulator import iteration_time, simulate
from obscura_jax.cli.schedule_outputs import write_outputs
from obscura_jax.cli.main import add_model_module
from planner.names import SYSTEMS as _NAMES
from planner.profile import MAX_LAYERS, derive_profile, load_profile
from obscura_jax.errors import UsageError
from models.errors import ObscuraError
from schedules.generators import check_pipeline_size
from schedules.sizes import format_bytes, parse_bytes


def add_parser(sub):
    """Long: one add_argument per flag, each with its help."""
    p = sub.add_parser(
        "plan", help="plan adjusted stages, per-op recompute, swapping and partition for a memory limit",
        description="Find the adjusted stages (CMB-Identifying), choose per-op recompute with OR-Tools "
                    "CP-SAT over a swap grid (best by simulated time), rebalance the partition "
                    "(Algorithm 1), choose the schedule family (1F1B, interleaved V=2/4, ZB-H1; plain or "
                    "with Obscura on it), and compare with DAPPLE, DAPPLE+, Recomp-N, OHP-CMB, the strawman, "
                    "interleaved and ZB-H1 with full recompute.")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--profile", metavar="PROFILE.json",
                     help="an obscura-profile/1 file (required unless --analytic; no default)")
    src.add_argument("--analytic", metavar="MODEL",
                     help="plan on a profile derived from MODEL's shapes (see --device) "
                          "(required unless --profile; no default)")
    p.add_argument("--device", default="A100-80GB", help="device of --analytic (A100-80GB or H200)")
    p.add_argument("--seq-len", type=int, default=4096, help="sequence length of --analytic")
    p.add_argument("--micro-batch", type=int, default=1,
                   help="micro-batch size of --analytic (the whole micro-batch: --data-parallel splits it)")
    p.add_argument("--layers", type=int, default=None,
                   help="plan for this many layers with the profile's per-layer costs (13B -> 28B) "
                        "(default: the profile's own)")
    p.add_argument("--stages", type=int, required=True, metavar="S", help="pipeline stages p")
    p.add_argument("--microbatches", type=int, required=True, metavar="M", help="micro-batches per iteration m")
    p.add_argument("--memory-limit", required=True, metavar="G", help="per-device bytes, or e.g. 80GiB, 85.9GB")
    p.add_argument("--data-parallel", type=int, default=1, metavar="D",
                   help="plan for stages on D x T devices: each micro-batch of the profile splits over D; "
                        "a profile whose micro-batch D does not divide is scaled to one it does (an estimate, "
                        "said in a note) (default 1)")
    p.add_argument("--tensor-parallel", type=int, default=1, metavar="T",
                   help="tensor parallelism inside each stage (Megatron layout of the model's registration; "
                        "heads and FFN width divisible by T); peaks and the limit are per device (default 1)")
    p.add_argument("--reserve", default="0", metavar="SIZE",
                   help="extra headroom: keep this much of the limit free beyond what the plan counts "
                        "(weights, activations and the profile's XLA scratch): allocator fragmentation, "
                        "a CUDA context, e.g. 2GiB")
    p.add_argument("--offload", default=None, metavar="OPS",
                   help="ops every stage keeps in pinned host memory (op or preset names, comma-separated, as "
                        "--policy; not those a stage recomputes): the plan counts their bytes as host, not "
                        "device, bytes; train the plan with the same --offload (default: none)")
    p.add_argument("--no-cmb", action="store_true", help="identify adjusted stages without trying CMB first")
    p.add_argument("--no-swap", action="store_true", help="no activation swapping (lambda = 0)")
    p.add_argument("--no-partition", action="store_true", help="keep the even partition (no Algorithm 1)")
    p.add_argument("--no-ip", action="store_true",
                   help="recompute whole units on adjusted stages instead of choosing ops (ablation)")
    p.add_argument("--weight-grad", choices=("hold", "rederive"), default="hold",
                   help="how a split backward's W gets its inputs in the zero-bubble families: hold them from I, "
                        "or rederive them from the unit's input (less memory, more W time; priced by the profile's "
                        "weight_grad_rederive_* fields; the plan records it and train --plan runs it) (default: hold)")
    p.add_argument("--no-families", action="store_true",
                   help="Obscura on 1F1B only: no interleaved or ZB-H1 family, nor their baselines")
    p.add_argument("--json", metavar="PATH", default=None,
                   help="write the plan (obscura-plan/1) here (default: not written)")
    e = p.add_argument_group("what the plan simulated (the pick; `obscura simulate --from-schedule S "
                             "--costs C` reproduces its iteration)")
    e.add_argument("--schedule-json", metavar="PATH", help="its schedule (obscura-schedule/2) (default: not written)")
    e.add_argument("--costs-json", metavar="PATH",
                   help="its StageCosts JSON, as `simulate --costs` reads it (default: not written)")
    e.add_argument("--torch-csv", metavar="PATH",
                   help="its order as torch's compute_only CSV (no recompute settings or swaps in it) "
                        "(default: not written)")
    e.add_argument("--trace", metavar="PATH", help="its simulated timeline as a Perfetto trace (default: not written)")
    e.add_argument("--gantt", metavar="PNG", help="its simulated Gantt chart, PNG and SVG (default: not drawn)")
    p.add_argument("--calibration", metavar="PATH", default=None,
                   help="obscura-calibration/1 JSON: also report the plan's iteration with its launch overhead, "
                        "optimizer step and link sharing (default: the ideal simulation only)")
    add_model_module(p)
    p.set_defaults(func=run)


def run(args):
    from planner.analytic import analytic_profile  # lazy (all four): they load JAX and OR-Tools
    from planner.layouts.mesh_costs import MeshLayout
    from planner.costs import offload_profile
    from planner.plan import plan_search, save_plan

    check_plan_args(args)
    cal = load_calibration(args.calibration) if args.calibration else None   # every input before any output
    if args.profile:
        prof = load_profile(args.profile)
    else:
        prof = analytic_profile(models.get_config(args.analytic), args.seq_len, args.micro_batch, args.device)
    if args.layers is not None:
        prof = derive_profile(prof, args.layers)
    offload = offload_ops(args.offload, prof.family)
    res = plan_search(offload_profile(prof, offload) if offload else prof, args.stages, args.microbatches, args.memory_limit, cmb=not args.no_cmb,
                      swap=not args.no_swap, partition=not args.no_partition, ip=not args.no_ip,
                      reserve=args.reserve, profile_path=args.profile, families=not args.no_families,
                      layout=MeshLayout(args.data_parallel, args.tensor_parallel), weight_grad=args.weight_grad)
    plan = res.plan
    if args.json:
        save_plan(plan, args.json)
    print(render(prof, res))
    for note in res.notes:
        print(f"note: {note}")
    export(args, res)
    if any(u.scratch_bytes is None for _, u in prof.units):
        print("note: the profile records no XLA scratch (units.K.scratch_bytes: an analytic profile, or one "
              "written before the field): the plan counts none; keep room for it with --reserve")
    if offload:
        print("\n".join(offload_lines(prof, plan, offload, args)))
    if cal is not None:
        print(calibrated_line(res, cal))
    if args.json:
        print(f"wrote {args.json}")
    return 0


def check_plan_args(args) -> None:
    """Every flag checked before the profile is read or anything is searched."""
    for flag, v in (("--stages", args.stages), ("--microbatches", args.microbatches),
                    ("--seq-len", args.seq_len), ("--micro-batch", args.micro_batch), ("--layers", args.layers),
                    ("--data-parallel", args.data_parallel), ("--tensor-parallel", args.tensor_parallel)):
        if v is not None and v < 1:
            raise UsageError(f"{flag} must be >= 1, got {v}")
    if args.layers is not None and args.layers > MAX_LAYERS:
        raise UsageError(f"--layers must be <= {MAX_LAYERS} (a bound of the planner, which walks every unit), "
                         f"got {args.layers}")
    check_pipeline_size(args.stages, args.microbatches)
    limit = parse_bytes(args.memory_limit, "memory limit (--memory-limit)")
    reserve = parse_bytes(args.reserve, "reserve (--reserve)", allow_zero=True)
    if reserve >= limit:
        raise UsageError(f"--reserve {args.reserve} leaves nothing of --memory-limit {args.memory_limit}")
    if args.offload is not None:
        try:
            models.offload_names(args.offload)
        except ObscuraError as e:
            raise UsageError(f"--offload: {e}") from None


def offload_ops(text: str | None, family: str) -> frozenset:
    """--offload's ops for the profile's model family (one line for an unknown one)."""
    if text is None:
        return frozenset()
    try:
        return models.resolve_policy("none", family, offload=text).offload
    except ObscuraError as e:
        raise UsageError(f"--offload: {e}") from None


def offload_lines(prof, plan, offload: frozenset, args) -> list[str]:
    """What --offload changed: the host bytes per micro-batch the peaks leave out, what
    they do not count (a backward brings its micro-batch's offloaded bytes back to
    the device) and whether that still fits, and how to train the plan."""
    from planner.costs import host_kept_bytes  # lazy (both): the planner loads JAX
    from planner.recompute.residuals import exact_unit_kept

    ops = ", ".join(o for o in prof.op_names if o in offload)
    host = [host_kept_bytes(prof, st.units, st.recompute, offload) for st in plan.stages]
    back = [host_kept_bytes(prof, st.units, (), offload) for st in plan.stages]
    room = parse_bytes(args.memory_limit, "memory limit") - parse_bytes(args.reserve, "reserve", allow_zero=True)
    over = [s for s, st in enumerate(plan.stages) if st.predicted_peak_bytes + back[s] > room]
    lines = [f"offload {ops}: counted as host bytes, not device bytes (the peaks above are device bytes); on host "
             "per micro-batch: " + ", ".join(f"stage {s} {format_bytes(h, 2)}" for s, h in enumerate(host)),
             "not in the peaks: a backward brings its micro-batch's offloaded bytes back to the device (a stage "
             "recomputing an offloaded op holds it while recomputing), up to "
             + ", ".join(format_bytes(b, 2) for b in back)
             + ("; that fits the limit" if not over else
                f"; stage(s) {', '.join(map(str, over))} would then pass the limit: plan again with --reserve "
                f"{format_bytes(max(back), 2)}")]
    if exact_unit_kept(prof) is not None:
        lines.append("note: with --offload the planner checks kept bytes with the profile's per-op figures only "
                     "(the offloaded profile no longer matches the traced model's residuals)")
    lines.append(f"train this plan with --offload {','.join(o for o in prof.op_names if o in offload)}")
    return lines


def export(args, res) -> None:
    """Write the pick's schedule, costs, order, trace and chart as asked; say how to
    reproduce its time with `simulate`."""
    if not any(getattr(args, f) for f in ("schedule_json", "costs_json", "torch_csv", "trace", "gantt")):
        return
    from planner.plans.plan_export import recomputing_stages  # lazy: only when exporting
    ev = res.best
    timeline = simulate(ev.schedule, ev.costs, check=False)
    write_outputs(args, ev.schedule, timeline, ev.costs,
                  title=f"{res.plan.schedule}: simulated iteration {ev.makespan:.4g} s")
    if args.schedule_json and args.costs_json:
        print(f"reproduce: obscura simulate --from-schedule {args.schedule_json} --costs {args.costs_json}")
    if args.torch_csv and args.costs_json:
        stages = ",".join(map(str, recomputing_stages(res.plan)))
        swaps = any(st.swap_blocks for st in res.plan.stages)
        print(f"from the CSV: obscura simulate --from-torch-csv {args.torch_csv} --costs {args.costs_json}"
              + (f" --adjusted {stages}" if stages else "")
              + (" (the plan's swaps are not in a torch CSV: only --from-schedule has them)" if swaps else ""))


def calibrated_line(res, cal) -> str:
    """The plan's iteration as the calibrated simulator predicts it, and which terms are assumed."""
    ev = res.best
    costs = cal.apply(ev.costs)
    t = iteration_time(ev.schedule, costs, check=False)
    return (f"predicted iteration {t:.4g} s calibrated (ideal {ev.makespan:.4g} s; {cal.describe()})")


def render(prof, res) -> str:
    """The plan table, every family's best, and the paper's baselines."""
    from planner.search import warmups  # lazy: planner.search loads the planner

    plan, best = res.plan, res.best
    data, tensor = plan.layout
    mesh = "" if (data, tensor) == (1, 1) else f", stages on {data} data x {tensor} tensor devices"
    v = plan.virtual_stages
    batch = plan.source.micro_batch if plan.source is not None else prof.micro_batch
    lines = [f"{prof.model} ({prof.num_layers} layers, seq {prof.seq_len}, micro-batch {batch}) "
             f"on {prof.device}{mesh}: {plan.num_devices} devices, {plan.num_stages} model stages"
             f"{f' ({v} per device)' if v > 1 else ''}, m={plan.num_microbatches}, limit "
             f"{format_bytes(plan.memory_limit, 2)}{' per device' if mesh else ''}; planned in {res.seconds:.2f} s"]
    lines.append(f"pick: {_pick_text(res)}")
    if res.source == "search":
        lines += _paper_lines(res)
    lines.append(f"{'stage':>5} {'units':>11} {'device':>6} {'adj':>3} {'lambda':>6} {'warm-up':>7} "
                 f"{'peak':>11}  recompute")
    warm = warmups(best.schedule)
    where = best.schedule.stage_to_device
    for s, st in enumerate(plan.stages):
        rec = ",".join(st.recompute) if st.recompute else "-"
        lines.append(f"{s:>5} {models.format_units(st.units):>11} {where[s]:>6} {'yes' if st.adjusted else 'no':>3} "
                     f"{st.swap_blocks:>6} {warm[s]:>7} {format_bytes(st.predicted_peak_bytes, 2):>11}  {rec}")
    t = plan.predicted_iteration_time
    if data > 1:
        lines.append(f"data all-reduce once a step after each stage's last backward: the plan's "
                     f"{best.makespan:.4g} s pipeline ends at {t:.4g} s (closed form, planner.mesh_plan)")
    if plan.families:
        lines += family_table(plan)
    parts = []
    needs = dict(plan.baseline_needs)
    for name, bt in plan.baselines:
        label = _NAMES.get(name, name)
        if bt is None:
            parts.append(f"{label} does not fit, needs {format_bytes(needs[name], 2)}" if name in needs
                         else f"{label} does not fit")
        else:
            parts.append(f"{label} {bt:.4g} s ({bt / t:.3f}x)")
    lines.append(f"the paper's baselines (1F1B order, simulated): plan {t:.4g} s | " + " | ".join(parts))
    return "\n".join(lines)


def _pick_text(res) -> str:
    plan = res.plan
    if res.source.startswith("family:"):
        name = res.source.split(":", 1)[1]
        summary = next(f for f in plan.families if f.name == name)
        return (f"{summary.label} ({summary.variant}), {plan.predicted_iteration_time:.4g} s: the fastest "
                f"plan that fits among the families below (schedule {plan.schedule})")
    if res.source == "search":
        return f"Obscura on 1F1B (the paper's search), {plan.predicted_iteration_time:.4g} s"
    return f"the {_NAMES.get(res.source, res.source)} baseline, {plan.predicted_iteration_time:.4g} s"


def _paper_lines(res) -> list[str]:
    """What Obscura's own search decided (adjusted stages, CMB, partition adjustment)."""
    plan, best, k = res.plan, res.best, res.last_adjusted
    out = []
    cmb_only = [str(s) for s, st in enumerate(plan.stages) if st.recompute and not st.adjusted]
    if k < 0:
        out.append("no stage adjusted: 1F1B fits" + (f" once stage(s) {', '.join(cmb_only)} recompute the CMB "
                                                     "set (CMB-Identifying)" if cmb_only else
                                                     " with nothing recomputed"))
    else:
        ident = f"identified 0..{res.identified}" if res.identified >= 0 else "none identified"
        out.append(f"adjusted stages 0..{k} ({ident}); schedule {plan.schedule}, beta {best.config.beta:g}")
    if cmb_only and k >= 0:
        out.append(f"not adjusted, recomputing in 1F1B order (CMB-Identifying): stage(s) {', '.join(cmb_only)}")
    if res.adjustment is not None and res.adjustment.moves:
        out.append(f"partition adjustment: moves {list(res.adjustment.moves)}, undone {res.adjustment.undone}; "
                   f"{'kept' if best.config.partition != res.even.config.partition else 'not kept'} "
                   f"(even partition simulates {res.even.makespan:.4g} s)")
    return out


def family_table(plan) -> list[str]:
    """One row per schedule family: its fastest plan that fits, or what it needs; and
    its time with no limit (nothing recomputed)."""
    out = ["schedule families, each at its fastest plan that fits (per-stage recompute and swaps "
           "chosen for the limit; simulated):",
           f"  {'family':<26} {'fits':<5} {'time':>9} {'vs pick':>8} {'peak (max)':>11}  {'found by':<24} "
           f"{'no limit: time':>14} {'its peak':>10}"]
    t = plan.predicted_iteration_time
    for f in plan.families:
        if not f.evaluated:
            out.append(f"  {f.label:<26} not evaluated: {f.note}")
            continue
        free = f"{f.unlimited_time:>13.4g}s {format_bytes(f.unlimited_peak_bytes, 1):>10}"
        if f.fits:
            out.append(f"  {f.label:<26} {'yes':<5} {f.iteration_time:>8.4g}s {f.iteration_time / t:>7.3f}x "
                       f"{format_bytes(max(f.peak_bytes), 2):>11}  {f.variant:<24} {free}")
        else:
            need = format_bytes(f.needs_bytes, 2) if f.needs_bytes is not None else "?"
            out.append(f"  {f.label:<26} {'no':<5} {'-':>9} {'-':>8} {'needs ' + need:>11}  {'-':<24} {free}")
    return out
