"""obscura plan: a profile + a memory limit -> an Obscura plan (obscura-plan/1),
printed as a table with the simulated comparison against the baselines."""
from __future__ import annotations

_NAMES = {"dapple": "DAPPLE", "dapple_plus": "DAPPLE+", "recomp": "Recomp-N", "ohp_cmb": "OHP-CMB",
          "strawman": "Strawman"}


def add_parser(sub):
    p = sub.add_parser(
        "plan", help="plan adjusted stages, per-op recompute, swapping and partition for a memory limit",
        description="Find the adjusted stages (CMB-Identifying), choose per-op recompute with OR-Tools "
                    "CP-SAT over a swap grid (best by simulated time), rebalance the partition "
                    "(Algorithm 1), and compare with DAPPLE, DAPPLE+, Recomp-N, OHP-CMB and the strawman.")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--profile", metavar="PROFILE.json", help="an obscura-profile/1 file")
    src.add_argument("--analytic", metavar="MODEL",
                     help="plan on a profile derived from MODEL's shapes (see --device)")
    p.add_argument("--device", default="A100-80GB", help="device of --analytic (A100-80GB or H200)")
    p.add_argument("--seq-len", type=int, default=4096, help="sequence length of --analytic")
    p.add_argument("--micro-batch", type=int, default=1, help="micro-batch size of --analytic")
    p.add_argument("--layers", type=int, default=None,
                   help="plan for this many layers with the profile's per-layer costs (13B -> 28B)")
    p.add_argument("--stages", type=int, required=True, metavar="S")
    p.add_argument("--microbatches", type=int, required=True, metavar="M")
    p.add_argument("--memory-limit", required=True, metavar="G", help="per-device bytes, or e.g. 80GiB, 85.9GB")
    p.add_argument("--reserve", default="0", metavar="SIZE",
                   help="keep this much of the limit free for what the model does not count "
                        "(XLA scratch, fragmentation), e.g. 2GiB")
    p.add_argument("--no-cmb", action="store_true", help="identify adjusted stages without trying CMB first")
    p.add_argument("--no-swap", action="store_true", help="no activation swapping (lambda = 0)")
    p.add_argument("--no-partition", action="store_true", help="keep the even partition (no Algorithm 1)")
    p.add_argument("--no-ip", action="store_true",
                   help="recompute whole units on adjusted stages instead of choosing ops (ablation)")
    p.add_argument("--json", metavar="PATH", default=None, help="write the plan (obscura-plan/1) here")
    p.set_defaults(func=run)


def run(args):
    from planner.identify import format_bytes
    from planner.plan import plan_search, save_plan
    from planner.profile import derive_profile, load_profile

    if args.profile:
        prof = load_profile(args.profile)
    else:
        import models
        from planner.analytic import analytic_profile
        prof = analytic_profile(models.get_config(args.analytic), args.seq_len, args.micro_batch, args.device)
    if args.layers is not None:
        prof = derive_profile(prof, args.layers)
    res = plan_search(prof, args.stages, args.microbatches, args.memory_limit, cmb=not args.no_cmb,
                      swap=not args.no_swap, partition=not args.no_partition, ip=not args.no_ip,
                      reserve=args.reserve)
    plan = res.plan
    if args.json:
        save_plan(plan, args.json)
    print(render(prof, res))
    if args.json:
        print(f"wrote {args.json}")
    return 0


def render(prof, res) -> str:
    """The plan table and the comparison line."""
    from planner.identify import format_bytes

    plan, best = res.plan, res.best
    k = res.last_adjusted
    lines = [f"{prof.model} ({prof.num_layers} layers) on {prof.device}: p={plan.num_stages}, "
             f"m={plan.num_microbatches}, limit {format_bytes(plan.memory_limit)}; planned in {res.seconds:.2f} s"]
    if k < 0:
        lines.append("1F1B fits: no stage adjusted")
    else:
        ident = f"identified 0..{res.identified}" if res.identified >= 0 else "none identified"
        lines.append(f"adjusted stages 0..{k} ({ident}); schedule {plan.schedule}, beta {best.config.beta:g}")
    if res.adjustment is not None and res.adjustment.moves:
        lines.append(f"partition adjustment: moves {list(res.adjustment.moves)}, undone {res.adjustment.undone}; "
                     f"{'kept' if best.config.partition != res.even.config.partition else 'not kept'} "
                     f"(even partition simulates {res.even.makespan:.4g} s)")
    if res.source != "search":
        lines.append(f"note: the {_NAMES.get(res.source, res.source)} baseline simulates faster than the searched "
                     f"configuration ({res.searched.makespan:.4g} s), so the plan is that baseline")
    lines.append(f"{'stage':>5} {'units':>11} {'adj':>3} {'lambda':>6} {'warm-up':>7} {'peak':>11}  recompute")
    warm = _warmups(best.schedule)
    for s, st in enumerate(plan.stages):
        rec = ",".join(st.recompute) if st.recompute else "-"
        lines.append(f"{s:>5} {str(list(st.units)):>11} {'yes' if st.adjusted else 'no':>3} {st.swap_blocks:>6} "
                     f"{warm[s]:>7} {format_bytes(st.predicted_peak_bytes):>11}  {rec}")
    t = plan.predicted_iteration_time
    parts = [f"obscura {t:.4g} s"]
    for name, v in plan.baselines:
        label = _NAMES.get(name, name)
        if v is None:
            ev = res.baselines.get(name)
            need = f", needs {format_bytes(max(ev.peaks))}" if ev is not None else ""
            parts.append(f"{label} OOM{need}")
        else:
            parts.append(f"{label} {v:.4g} s ({v / t:.3f}x)")
    lines.append("simulated: " + " | ".join(parts))
    return "\n".join(lines)


def _warmups(schedule) -> list[int]:
    from planner.search import warmups
    return list(warmups(schedule))
