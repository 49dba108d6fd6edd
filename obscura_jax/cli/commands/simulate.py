"""obscura simulate: generate (or load) a schedule, simulate it, print per-stage figures.

    obscura simulate --schedule recomp --stages 4 --microbatches 8 --adjusted all \\
        --fwd 1 --bwd 2 --recompute-time 1 --json sim.json --gantt sim.png

    obscura simulate --schedule interleaved --virtual-stages 2 --stages 4 --microbatches 8 \\
        --fwd 0.5 --bwd 1 --trace t.json --torch-csv t.csv

--stages is the pipeline depth p (devices); interleaved (--virtual-stages V) and
zb-v build p*V model stages, and per-stage costs are per model stage. Costs come
from --fwd/--bwd/--recompute-time (+ --input-grad-time/--weight-grad-time for a
split backward's I and W, --act-bytes, --host-bandwidth, ..., uniform over stages)
or from --costs costs.json (a StageCosts JSON: keys are the StageCosts field names,
see schedules/costs.py), not both. --schedule-json writes the schedule
("obscura-schedule/2"), --from-schedule simulates a schedule file (/2 or /1);
--torch-csv / --from-torch-csv write / read torch.distributed.pipelining's
compute_only CSV; --trace writes a Chrome trace-event JSON (ui.perfetto.dev).
Pure Python: never imports JAX.
"""
from __future__ import annotations

import math
import sys

from obscura_jax.cli.schedule_outputs import write_outputs
from obscura_jax.errors import UsageError
from schedules import StageCosts, generate, io, simulate
from schedules.calibration import load_calibration
from schedules.ir import check_recompute_names
from schedules.generators import CHUNKED, SCHEDULES, check_pipeline_size, model_stages
from schedules.generators.join import FIRST_WEIGHT_GRAD, first_weight_grad
from schedules.formats.jsonio import read_json, write_json_atomic
from schedules.simulator import iteration_time, on_one_device
from schedules.sizes import parse_int, parse_real, split_items
from schedules.formats.text import pipeline_shape, timeline_ascii
from schedules.formats.torch_csv import load_torch_csv

_COST_FLAGS = ("fwd", "bwd", "recompute_time", "act_bytes", "act_bytes_recompute", "host_bandwidth",
               "p2p_latency", "p2p_bandwidth", "boundary_bytes", "input_grad_time", "weight_grad_time",
               "weight_grad_fraction")


def add_parser(sub):
    p = sub.add_parser("simulate", help="simulate a pipeline schedule (no JAX)",
                       description="Generate or load a pipeline schedule and simulate it under a cost model.")
    g = p.add_argument_group("schedule")
    g.add_argument("--schedule", help=f"generator name: {', '.join(SCHEDULES)} (default: none; required "
                                      "unless --from-schedule or --from-torch-csv)")
    g.add_argument("--from-schedule", metavar="PATH", help="simulate this schedule JSON instead of generating (default: generate --schedule)")
    g.add_argument("--from-torch-csv", metavar="PATH",
                   help="simulate this torch.distributed.pipelining compute_only CSV instead of generating "
                        "(default: generate --schedule)")
    g.add_argument("--stages", metavar="P", help="pipeline depth (devices) (default: none; required with --schedule)")
    g.add_argument("--virtual-stages", metavar="V", help=f"model chunks per device of {', '.join(CHUNKED)} "
                                                         "(default 2)")
    g.add_argument("--migrate", action="store_true",
                   help="obscura-interleaved/-zb-h1/-interleaved-zb: let forwards migrate (hold more micro-batches)")
    g.add_argument("--microbatches", metavar="M", help="micro-batches per iteration (default: none; required with --schedule)")
    g.add_argument("--adjusted", metavar="K|all|none|LIST",
                   help="recomputing (adjusted) stages: K = stages 0..K, 'all', 'none', or a list like 0,2 "
                        "(default: none for the plain schedules; ALL stages for recomp, "
                        "strawman, obscura and obscura-*, each recomputing --recompute; with --from-torch-csv, "
                        "whose order carries no recompute settings: the stages that recompute)")
    g.add_argument("--recompute", default="full", metavar="NAMES",
                   help="what adjusted stages recompute: op or preset names, comma-separated (default: full)")
    g.add_argument("--swap-blocks", default="0", metavar="L|LIST",
                   help="lambda at the last adjusted stage (+1 per earlier stage) or one per stage")
    g.add_argument("--swap-fraction", default="0", metavar="BETA", help="share of a block swapped, in [0, 1]")
    g.add_argument("--warmup", metavar="LIST", help="per-stage warm-up forwards (1f1b/recomp/zb-h1-capped) or caps "
                                                   "(obscura; per device for obscura-interleaved/-zb-h1) "
                                                   "(default: the generator's)")
    g.add_argument("--first-weight-grad", default="split", choices=FIRST_WEIGHT_GRAD,
                   help="at-once: stage 0's backward whole where its W follows its I, as obscura plan and "
                        "train --first-weight-grad run it (schedules.generators.join) (default split)")
    c = p.add_argument_group("costs (uniform over stages unless --costs)")
    c.add_argument("--costs", metavar="PATH", help="StageCosts JSON (keys = StageCosts field names) (default: uniform costs from the flags below)")
    c.add_argument("--fwd", help="forward time f (default 1)")
    c.add_argument("--bwd", help="backward time b (default 2)")
    c.add_argument("--recompute-time", help="recompute time r inside an adjusted backward (default 1)")
    c.add_argument("--input-grad-time", help="I, the input-grad half of a split backward "
                                             "(default: bwd * (1 - weight grad fraction))")
    c.add_argument("--weight-grad-time", help="W, the weight-grad half (default: bwd * weight grad fraction)")
    c.add_argument("--weight-grad-fraction", help="share of bwd a split backward's W takes (default 0.5)")
    c.add_argument("--act-bytes", help="activation bytes kept per micro-batch, no recompute (default 0)")
    c.add_argument("--act-bytes-recompute", help="the same on adjusted stages (default: --act-bytes)")
    c.add_argument("--host-bandwidth", help="bytes/time per direction to host (default inf)")
    c.add_argument("--p2p-latency", help="latency of a stage-to-stage transfer (default 0)")
    c.add_argument("--p2p-bandwidth", help="bytes/time between stages (default inf)")
    c.add_argument("--boundary-bytes", help="bytes sent between stages per micro-batch (default 0)")
    c.add_argument("--calibration", metavar="PATH",
                   help="obscura-calibration/1 JSON (scripts/device/fit_calibration.py): add its launch overhead, optimizer "
                        "step and link sharing, and report the calibrated predicted iteration (default: ideal costs)")
    c.add_argument("--one-device", action="store_true",
                   help="every stage on one device, one after another (the one-GPU engine bench) (default: off)")
    o = p.add_argument_group("output")
    o.add_argument("--json", metavar="OUT", help="write the Simulation JSON here (default: not written)")
    o.add_argument("--schedule-json", metavar="SCHED", help="write the schedule JSON here (default: not written)")
    o.add_argument("--torch-csv", metavar="CSV", help="write the schedule as torch's compute_only CSV here (default: not written)")
    o.add_argument("--trace", metavar="TRACE", help="write a Chrome trace-event JSON here (ui.perfetto.dev) (default: not written)")
    o.add_argument("--gantt", metavar="PNG", help="draw a Gantt chart (PNG and SVG beside it) (default: not drawn)")
    o.add_argument("--ascii", action="store_true", help="also print a time-scaled text chart")
    p.set_defaults(func=run)


def _number(text, flag: str, *, integer: bool = False, default=None):
    if text is None:
        return default
    parse = parse_int if integer else parse_real
    return parse(text, f"--{flag}", UsageError)


def _int_list(text: str, flag: str):
    """'3' -> 3; '3,2,1,0' -> (3, 2, 1, 0); an empty item is refused."""
    vals = tuple(_number(t, flag, integer=True) for t in split_items(text, f"--{flag}", UsageError))
    return vals[0] if len(vals) == 1 and "," not in text else vals


def _adjusted(text):
    if text is None:
        return None
    if "," in text:
        return _int_list(text, "adjusted")
    if not text.strip():
        raise UsageError("--adjusted is empty: give K, all, none or a list like 0,2")
    if text.strip() in ("all", "none"):
        return text.strip()
    return _number(text, "adjusted", integer=True)   # K: the generator checks the range


def _recomputing(schedule, args):
    """`schedule` with --adjusted's stages recomputing --recompute (a torch CSV's order
    carries no recompute settings; e.g. `plan --torch-csv` prints which stages do)."""
    from dataclasses import replace  # lazy: only this path rewrites stages
    from schedules import ScheduleError
    from schedules.generators.common import resolve_adjusted
    recompute = tuple(r.strip() for r in args.recompute.split(",") if r.strip())
    check_recompute_names(recompute)
    try:
        adjusted = resolve_adjusted(_adjusted(args.adjusted), schedule.num_stages)
    except ScheduleError as e:
        raise UsageError(f"--adjusted: {e}") from None
    return replace(schedule, stages=tuple(replace(spec, recompute=recompute if s in adjusted else ())
                                          for s, spec in enumerate(schedule.stages)))


def _costs(args, p: int):
    given = [f for f in _COST_FLAGS if getattr(args, f) is not None]
    if args.costs:
        if given:
            raise UsageError(f"--costs cannot be combined with --{given[0].replace('_', '-')}")
        costs = StageCosts.from_json(read_json(args.costs, "costs JSON"))
        if costs.num_stages != p:
            raise UsageError(f"--costs describes {costs.num_stages} stages, the schedule has {p}")
        return costs
    num = {f: _number(getattr(args, f), f.replace("_", "-")) for f in _COST_FLAGS}
    act = num["act_bytes"] or 0.0
    split = {k: (num[f],) * p for k, f in (("input_grad", "input_grad_time"), ("weight_grad", "weight_grad_time"))
             if num[f] is not None}
    return StageCosts.uniform(
        p, fwd=1.0 if num["fwd"] is None else num["fwd"], bwd=2.0 if num["bwd"] is None else num["bwd"],
        recompute=1.0 if num["recompute_time"] is None else num["recompute_time"],
        act_bytes=act, act_bytes_recompute=act if num["act_bytes_recompute"] is None else num["act_bytes_recompute"],
        boundary_bytes=num["boundary_bytes"] or 0.0,
        p2p_latency=num["p2p_latency"] or 0.0,
        p2p_bandwidth=float("inf") if num["p2p_bandwidth"] is None else num["p2p_bandwidth"],
        host_bandwidth=float("inf") if num["host_bandwidth"] is None else num["host_bandwidth"],
        weight_grad_fraction=0.5 if num["weight_grad_fraction"] is None else num["weight_grad_fraction"],
        **split)


def _table(schedule, timeline) -> str:
    shape = pipeline_shape([len(schedule.stages_on(d)) for d in range(schedule.num_devices)])
    step = (f", + optimizer step = iteration {timeline.iteration_time:.6g}" if timeline.optimizer is not None
            else "")
    head = (f"{schedule.name}: {shape}, {schedule.num_microbatches} micro-batches, "
            f"adjusted {list(schedule.adjusted_stages) or 'none'}; makespan {timeline.makespan:.6g}{step}; "
            f"bubble {timeline.bubble_fraction:.1%}, recompute {timeline.recompute_fraction:.1%} "
            "(idle device-seconds, recompute device-seconds / (devices x iteration time))")
    cols = ("stage" if schedule.one_stage_per_device else "device", "compute", "recompute", "fwd bubble",
            "bwd bubble", "comm wait", "swap", "peak in-flight", "peak act bytes")
    rows = [[str(s), f"{st.compute:.6g}", f"{st.recompute:.6g}", f"{st.forward_bubble:.6g}",
             f"{st.backward_bubble:.6g}", f"{st.comm_wait:.6g}", f"{st.swap:.6g}",
             str(st.peak_inflight_microbatches), f"{st.peak_activation_bytes:.4g}"]
            for s, st in enumerate(timeline.stages)]
    widths = [max(len(c), *(len(r[i]) for r in rows)) for i, c in enumerate(cols)]
    line = lambda cells: "  ".join(c.rjust(w) for c, w in zip(cells, widths))  # noqa: E731
    return "\n".join([head, line(cols)] + [line(r) for r in rows])


def _load(args):
    """The schedule (generated, or from a file) and its costs."""
    given = [f for f in ("from_schedule", "from_torch_csv") if getattr(args, f)]
    if len(given) == 2:
        raise UsageError("give --from-schedule or --from-torch-csv, not both")
    if given:
        if (args.schedule or args.stages or args.microbatches or args.warmup or args.virtual_stages
                or args.migrate or (args.adjusted and args.from_schedule)):
            raise UsageError(f"--{given[0].replace('_', '-')} takes the schedule from the file: drop --schedule/"
                             "--stages/--microbatches/--warmup/--virtual-stages/--migrate (and --adjusted with "
                             "--from-schedule, whose stages carry their recompute sets)")
        notes: list[str] = []
        schedule = (io.load_schedule(args.from_schedule) if args.from_schedule
                    else load_torch_csv(args.from_torch_csv, notes=notes))
        for note in notes:     # e.g. the REDUCE_GRAD / UNSHARD cells skipped, once
            print(f"note: {note}", file=sys.stderr)
        if args.adjusted:      # a torch CSV has no recompute settings: these stages recompute --recompute
            schedule = _recomputing(schedule, args)
        schedule = first_weight_grad(schedule, args.first_weight_grad)
        return schedule, _costs(args, schedule.num_stages)
    missing = [f for f in ("schedule", "stages", "microbatches") if getattr(args, f) is None]
    if missing:
        raise UsageError(f"simulate needs --{missing[0]} (or --from-schedule PATH)")
    p = _number(args.stages, "stages", integer=True)
    m = _number(args.microbatches, "microbatches", integer=True)
    if p < 1:
        raise UsageError(f"--stages must be >= 1, got {p}")
    v = _number(args.virtual_stages, "virtual-stages", integer=True)
    check_pipeline_size(p * (v or 1), m)   # before the per-stage costs are built
    extra = {}
    if v is not None:
        extra["virtual_stages"] = v
    if args.migrate:
        if not args.schedule.startswith("obscura-"):
            raise UsageError("--migrate applies to the obscura-* schedules on today's orders "
                             "(obscura-interleaved, obscura-zb-h1, obscura-interleaved-zb)")
        extra["migrate"] = True
    costs = _costs(args, model_stages(args.schedule, p, v) if args.schedule in SCHEDULES else p)
    extra["costs"] = costs
    if args.warmup is not None:
        warm = _int_list(args.warmup, "warmup")
        extra["warmup"] = warm if isinstance(warm, tuple) else (warm,)
    recompute = split_items(args.recompute, "--recompute", UsageError)
    check_recompute_names(recompute)     # also where no stage is adjusted (1f1b): never ignored silently
    schedule = generate(args.schedule, p, m, adjusted=_adjusted(args.adjusted), recompute=recompute,
                        swap_blocks=_int_list(args.swap_blocks, "swap-blocks"),
                        swap_fraction=_number(args.swap_fraction, "swap-fraction"), **extra)
    schedule = first_weight_grad(schedule, args.first_weight_grad)
    return schedule, costs


def _realism(args, schedule, costs):
    """(schedule, costs, calibration or None) with --calibration and --one-device applied."""
    cal = None
    if args.calibration:
        cal = load_calibration(args.calibration)
        costs = cal.apply(costs)
    if args.one_device:
        schedule = on_one_device(schedule, costs)
    return schedule, costs, cal


def _with_optimizer(timeline, schedule, costs):
    """The timeline ending with the costs' optimizer step (each device steps its stages
    in turn, as simulator.iteration_time adds it), when the costs have one."""
    per_device = [sum(costs.optimizer_time(s) for s in schedule.stages_on(d)) for d in range(schedule.num_devices)]
    return timeline.with_optimizer(per_device) if any(per_device) else timeline


def _predicted(schedule, costs, cal) -> str:
    t = iteration_time(schedule, costs, check=False)
    if cal is None:
        return (f"predicted iteration {t:.6g} (ideal: no launch overhead, no optimizer step, links not shared; "
                "--calibration adds them)")
    return f"predicted iteration {t:.6g} (calibrated: {cal.describe()})"


def run(args):
    schedule, costs = _load(args)
    schedule, costs, cal = _realism(args, schedule, costs)
    timeline = _with_optimizer(simulate(schedule, costs), schedule, costs)
    if not math.isfinite(timeline.makespan):
        raise UsageError(f"the simulated makespan is {timeline.makespan}: a cost, size or bandwidth is out "
                         "of range (see the costs flags)")
    print(_table(schedule, timeline))
    print(_predicted(schedule, costs, cal))
    if args.ascii:
        print(timeline_ascii(timeline))
    if args.json:
        data = timeline.to_json()
        data.update(num_microbatches=schedule.num_microbatches,
                    adjusted=list(schedule.adjusted_stages), costs=costs.to_json())
        write_json_atomic(args.json, data)
        print(f"wrote {args.json}")
    write_outputs(args, schedule, timeline)
    return 0
