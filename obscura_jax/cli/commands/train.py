"""obscura train: run any schedule on JAX devices and measure it.

    obscura train --model llama2-tiny --stages 4 --microbatches 8 --schedule obscura \\
        --adjusted 1 --swap-blocks 2 --swap-fraction 0.5 --steps 20 --data stdlib --json run.json
    obscura train ... --processes 4            (4 local processes; docs/multiprocess.md)
"""
from __future__ import annotations

import os
from pathlib import Path

from obscura_jax.cli.commands.layout_row import apply_layout
from obscura_jax.cli.commands.run_args import (LAYOUT_KEYS, add_check_arg, add_model_data_args, add_process_args,
                                           add_schedule_args, check_run_size, exact_matmuls, fill_defaults,
                                           needed_stages, plan_preset, run_config, run_with_processes)
from obscura_jax.cli import interrupt
from obscura_jax.checkpoints.directory import check_unlocked
from obscura_jax.errors import UsageError
from obscura_jax.observe.report import train_report
from schedules.generators import SCHEDULES
from schedules.formats.jsonio import write_json_atomic


def add_parser(sub):
    p = sub.add_parser(
        "train", help="train through a pipeline schedule on JAX devices and measure it",
        description="Execute a pipeline schedule (generator name, schedule JSON or plan) on JAX devices: "
                    "per-step loss and tokens/s, iteration time against the simulator's prediction "
                    "from costs measured in the same run, per-stage peak memory, measured timeline.")
    p.add_argument("--schedule", default=None,
                   help=f"a generator ({', '.join(SCHEDULES)}) or a schedule JSON file (default 1f1b)")
    p.add_argument("--plan", default=None, metavar="PLAN.json",
                   help="run a planner plan (schedule, partition, policies) instead of --schedule; the "
                        "plan's model, layers, seq len, micro-batch and stage layout (D x T) become the defaults "
                        "(default: no plan)")
    p.add_argument("--plan-scale-down", action="store_true",
                   help="run a plan made for another model (e.g. a 28B plan on llama2-tiny): its schedule, "
                        "recompute sets and swapping on this model, the partition mapped proportionally "
                        "onto its units; the run is labelled not comparable (default: off: such a plan is "
                        "refused)")
    p.add_argument("--partition", default=None, metavar="N,N,...",
                   help="units per model stage, in stage order (the embedding, attention and MLP of each layer, "
                        "the head: `obscura model-info` lists them), e.g. a plan family's balanced partition "
                        "(default: even, or the plan's)")
    add_schedule_args(p)
    add_model_data_args(p)
    add_process_args(p)
    g = p.add_argument_group("checkpoints and output")
    g.add_argument("--checkpoint-dir", default=None, metavar="D", help="Orbax checkpoints of params, optimizer state, step (default: none saved)")
    g.add_argument("--resume", action="store_true", help="continue from the newest checkpoint in --checkpoint-dir (a dir holding none: one "
                        "warning line, and the run starts afresh at step 1)")
    g.add_argument("--checkpoint-every", type=int, default=None, metavar="N",
                   help="also save every N >= 1 steps (default: at the end only)")
    g.add_argument("--gantt", default=None, metavar="PNG",
                   help="draw the measured timeline: PNG, and an SVG beside it (default: not drawn)")
    g.add_argument("--trace", default=None, metavar="TRACE.json",
                   help="write the measured step as a Perfetto / Chrome trace-event JSON (ui.perfetto.dev): "
                        "a track per stage, swap and transfer tracks, recompute inside each backward, the "
                        "optimizer step; it spans the measured iteration time (default: not written)")
    g.add_argument("--xla-profile", default=None, metavar="DIR",
                   help="run the timed steps inside jax.profiler.trace, writing XLA's device trace under DIR "
                        "(TensorBoard's profile plugin, or the .trace.json.gz in ui.perfetto.dev) "
                        "(default: not profiled)")
    add_check_arg(g)
    g.add_argument("--json", default=None, metavar="OUT", help="write the run's measurements as JSON (default: not written)")
    p.set_defaults(func=run)


def run(args):
    check_outputs(args)
    interrupt.note_checkpoint_dir(args.checkpoint_dir)   # Ctrl-C names its last complete checkpoint
    if args.plan:
        given = [f for f, v in (("--schedule", args.schedule), ("--adjusted", args.adjusted),
                                ("--swap-blocks", args.swap_blocks or None),
                                ("--swap-fraction", args.swap_fraction or None)) if v is not None]
        if given:
            raise UsageError(f"--plan fixes the schedule, adjusted stages and swapping: drop {given[0]}")
    args.schedule = "1f1b" if args.schedule is None else args.schedule
    row = apply_layout(args)
    preset = plan_preset(args.plan)
    check_plan_layout(args, preset)
    if args.model is not None and args.model != preset.get("model"):
        # the plan's shape belongs to the plan's model; its stage mesh is the plan's still
        preset = {k: v for k, v in preset.items() if k in LAYOUT_KEYS}
    fill_defaults(args, preset)
    run_config(args)          # every run flag (--policy, --offload, ...) checked before a process starts
    if row is not None and row.note() and args.processes == 1 and os.environ.get("OBSCURA_PROCESS_ID", "0") == "0":
        print(row.note())   # once: by a run alone, or by process 0 of several
    return run_with_processes(args, needed_stages(args), lambda place, group: _train(args, place, group))


def check_plan_layout(args, preset: dict) -> None:
    """A --data-parallel / --tensor-parallel given with --plan must be the plan's
    (unless --plan-scale-down: that run is not comparable anyway)."""
    if args.plan_scale_down:
        return
    for key in LAYOUT_KEYS:
        given, planned = getattr(args, key), preset.get(key)
        if given is not None and planned is not None and given != planned:
            flag = "--" + key.replace("_", "-")
            raise UsageError(f"{flag} {given} disagrees with plan {args.plan}, made for "
                             f"{preset['data_parallel']} data x {preset['tensor_parallel']} tensor devices a stage "
                             "(--plan-scale-down runs it anyway, not comparable)")


def check_outputs(args) -> None:
    """Before any work: checkpoint flags that go together, the checkpoint dir free
    (where each output can be written: obscura_jax/cli/files.py, for every command)."""
    if args.checkpoint_every is not None and args.checkpoint_every < 1:
        raise UsageError(f"--checkpoint-every must be >= 1, got {args.checkpoint_every} (leave it out to save "
                         "at the end only)")
    if (args.resume or args.checkpoint_every) and not args.checkpoint_dir:
        raise UsageError("--resume and --checkpoint-every need --checkpoint-dir")
    if args.checkpoint_dir:
        check_unlocked(Path(args.checkpoint_dir))


def _train(args, place, group) -> int:
    from obscura_jax.api import TrainResult, summarize   # lazy (these four): JAX starts after the devices are chosen
    from obscura_jax.run.checks import check_line, check_run
    from obscura_jax.observe.trace import write_measured_trace, xla_trace_files
    from obscura_jax.run.trainer import train

    cfg = run_config(args)
    check_run_size(cfg, group)
    if args.check:
        exact_matmuls()
    outcome = train(cfg, place, progress=not args.no_progress, group=group, xla_profile=args.xla_profile)
    res = summarize(outcome)
    if args.check:
        res["check"] = check_run(outcome, group)
    if not group.is_leader:          # process 0 reports and writes for the whole run
        return 0
    print(train_report(res))
    if args.check:
        print(check_line(res["check"]))
    written = []
    if args.gantt and outcome.timeline is not None:
        written += TrainResult(res, outcome).gantt(args.gantt, title=f"{res['schedule']} measured ({res['model']}); "
                                                                    "recompute: its measured share of B")
    if args.trace and write_measured_trace(outcome, args.trace):
        written.append(args.trace)
    if args.json:
        write_json_atomic(args.json, res)
        written.append(args.json)
    if args.xla_profile:
        written += xla_trace_files(args.xla_profile)
    for path in written:
        print(f"wrote {path}")
    if args.check and not res["check"]["equal"]:
        return 1
    return 0
