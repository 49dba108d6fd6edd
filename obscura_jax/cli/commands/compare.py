"""obscura compare: several schedules trained one after the other on the same devices,
model and data (in one process, or in several with --processes N); one table,
measured Gantt charts (PNG and SVG), a Perfetto trace and one JSON per schedule (and,
with --json, the comparison's JSON at a path of its own); every file written is listed.

    obscura compare --schedules 1f1b,obscura:adjusted=1:swap_blocks=2:swap_fraction=0.5 --out cmp
    obscura compare --demo --out demo_out      (what `make demo` runs)

--adjusted / --swap-blocks / --swap-fraction are defaults for the schedules that
transform the pipeline (recomp, strawman, obscura); gpipe and 1f1b run as defined
unless an item carries its own `:key=value` options (keys: adjusted, swap_blocks,
swap_fraction, adjusted_policy; list values joined with '+', e.g. adjusted=0+1).
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import tempfile
import uuid
from pathlib import Path

from obscura_jax.checkpoints.directory import DirectoryLock, beside_lock, check_unlocked
from obscura_jax.cli.commands.layout_row import apply_layout
from obscura_jax.cli.commands.run_args import (add_check_arg, add_model_data_args, add_process_args,
                                           add_schedule_args, check_run_size, exact_matmuls, fill_defaults,
                                           run_config, run_with_processes)
from models.errors import ObscuraError
from obscura_jax.errors import UsageError
from obscura_jax.observe.report import compare_report, train_report
from schedules.generators import SCHEDULES
from schedules.formats.jsonio import check_writable, write_json_atomic, write_text_atomic
from obscura_jax.run.run_config import DEFAULT_STAGES
from schedules.generators import SCHEDULES
from schedules.sizes import parse_int, parse_real, split_items

PLAIN = ("gpipe", "1f1b")
DEFAULT_SCHEDULES = "1f1b,obscura"
ITEM_KEYS = {"adjusted": str, "swap_blocks": parse_int, "swap_fraction": parse_real, "adjusted_policy": str}
# The demo: llama2-tiny learning Python's own source text on 4 emulated CPU devices.
DEMO = dict(model="llama2-tiny", data="stdlib", devices="cpu:4", stages=4, microbatches=8,
            micro_batch_size=4, seq_len=64, steps=40, lr=3e-3,
            schedules="1f1b,obscura:adjusted=1:swap_blocks=2:swap_fraction=0.5")


def add_parser(sub):
    p = sub.add_parser(
        "compare", help="run several schedules one after the other: one table + measured Gantt charts",
        description=__doc__.split("\n\n")[0])
    p.add_argument("--schedules", default=None,
                   help=f"comma list of schedules, each NAME[:key=value...], NAME a generator ({', '.join(SCHEDULES)}) "
                        f"(default {DEFAULT_SCHEDULES})")
    p.add_argument("--demo", action="store_true",
                   help="the built-in demo: llama2-tiny on stdlib text, 4 emulated CPU devices, "
                        "1F1B vs Obscura (explicit flags still override)")
    p.add_argument("--out", required=True, metavar="DIR", help="directory for the table, JSON and PNGs; one compare at a time (a lock "
                        "file .obscura.lock-DIR beside it while it runs)")
    p.add_argument("--json", default=None, metavar="PATH",
                   help="also write the comparison (obscura-compare/1, DIR/compare.json) here (default: not written)")
    add_check_arg(p)
    add_schedule_args(p)
    add_model_data_args(p)
    add_process_args(p)
    p.set_defaults(func=run)


def parse_items(text: str) -> list[tuple[str, dict]]:
    items = []
    for raw in split_items(text, "--schedules", UsageError):
        name, *opts = raw.split(":")
        kw = {}
        for opt in opts:
            key, sep, value = opt.partition("=")
            if not sep or key not in ITEM_KEYS:
                raise UsageError(f"bad schedule option {opt!r} in {raw!r}: use key=value with key in "
                                 f"{', '.join(ITEM_KEYS)}")
            try:
                kw[key] = ITEM_KEYS[key](value.replace("+", ",")) if key != "adjusted_policy" else \
                    split_items(value.replace("+", ","), key)
            except (ValueError, ObscuraError):
                raise UsageError(f"bad value {value!r} for {key} in {raw!r}") from None
        items.append((name, kw))
    labels = [item_label(name, kw) for name, kw in items]
    twice = next((label for i, label in enumerate(labels) if label in labels[:i]), None)
    if twice is not None:      # both runs would write the same files
        raise UsageError(f"--schedules lists {twice!r} twice: each item runs once (give it other options to "
                         "compare two settings)")
    return items


def item_label(name: str, kw: dict) -> str:
    """`name:key=value...`: the item's label in the table and its files' stem."""
    return ":".join([name] + [f"{k}={v}" for k, v in kw.items()])


def run(args):
    preset = dict(DEMO) if args.demo else {}
    if args.schedules is None:
        args.schedules = preset.pop("schedules", None) or DEFAULT_SCHEDULES
    preset.pop("schedules", None)
    row = apply_layout(args)
    fill_defaults(args, preset)
    if row is not None and row.note():
        print(row.note())
    items = parse_items(args.schedules)
    run_config(args)          # the shared flags, even where no item uses them (e.g. --swap-fraction)
    for name, kw in items:    # every item checked (and its schedule built) before the first one runs
        cfg = item_config(args, name, kw)
        cfg.resolve(cfg.model_config())
    check_out(Path(args.out))       # (--json and --out are where they can be written: cli/files.py)
    return run_with_processes(args, args.stages or DEFAULT_STAGES,
                              lambda place, group: _compare(args, items, place, group))


def item_config(args, name: str, kw: dict):
    defaults = ({"adjusted": None, "swap_blocks": 0, "swap_fraction": 0.0} if name in PLAIN else
                {"adjusted": args.adjusted, "swap_blocks": args.swap_blocks, "swap_fraction": args.swap_fraction})
    return run_config(args, schedule=name, **{**defaults, **kw})


def check_out(out: Path) -> None:
    """--out must be a new directory, an empty one, or an earlier compare's (replaced
    whole at the end), in a folder that takes new files."""
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out} is a file, expected a directory")
    # (another process of the same run may be probing the folder: its probe is not a file of --out)
    if out.is_dir() and any(not p.name.startswith(".obscura-probe-") for p in out.iterdir()) \
            and not (out / "compare.json").exists():
        raise UsageError(f"--out {out} holds files that are not a compare's outputs: choose a new or empty "
                         "directory (an earlier compare's --out is replaced whole)")
    check_writable(out / "compare.json", "--out", shown=out)
    check_unlocked(out, beside_lock(out), "--out")


def publish(tmp: Path, out: Path) -> None:
    """Move the finished outputs in `tmp` to `out` in one rename (an earlier
    compare's directory is moved aside first and removed after)."""
    # an interrupt waits until --out is whole again (delivered right after)
    masked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        old = None
        if out.is_dir() and any(out.iterdir()):
            old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.absolute().parent))
            os.replace(out, old)
        os.replace(tmp, out)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, masked)


def _compare(args, items, place, group) -> int:
    """Every schedule in turn on the same devices; process 0 writes the outputs into
    a fresh temporary directory beside --out and moves it into place at the end, so
    an interrupted or failed compare leaves --out as it was."""
    check_run_size(run_config(args), group)      # every item runs the same model and sizes
    lead = group.is_leader
    final = Path(args.out)
    out = lock = None
    if lead:     # everything is written here, and moved to --out only when complete
        final.absolute().parent.mkdir(parents=True, exist_ok=True)
        lock = DirectoryLock(final, beside_lock(final), "--out")   # one compare per --out at a time
        out = Path(tempfile.mkdtemp(prefix=f".{final.name}.partial-", dir=final.absolute().parent))
    try:
        code = _compare_into(args, items, place, group, out)
        if lead:
            names = sorted(p.relative_to(out) for p in out.rglob("*") if p.is_file())
            publish(out, final)
            for name in names:           # every file, as it now lies in --out
                print(f"wrote {final / name}")
            if args.json:
                write_json_atomic(Path(args.json), json.loads((final / "compare.json").read_text()))
                print(f"wrote {args.json}")
        return code
    finally:
        if out is not None and out.exists():
            shutil.rmtree(out, ignore_errors=True)
        if lock is not None:
            lock.release()


def _compare_into(args, items, place, group, out: Path | None) -> int:
    """The runs, writing into `out` (the leader's temporary directory).
    Long: each schedule's run, report, JSON and charts, then the table."""
    # lazy (these three): JAX starts after the devices are chosen
    from obscura_jax.api import measured_with_recompute, summarize
    from obscura_jax.observe.summary import simulated_with_optimizer
    from obscura_jax.run.checks import check_line, check_run
    from obscura_jax.observe.trace import write_measured_trace
    from obscura_jax.run.trainer import train
    from schedules.formats.gantt import draw_gantt, draw_gantts  # lazy: matplotlib

    lead = group.is_leader
    say = print if lead else (lambda *_: None)
    results, timelines, labels = [], [], []
    run_id = uuid.uuid4().hex[:12]
    if args.check:
        exact_matmuls()
    for name, kw in items:
        label = item_label(name, kw)
        cfg = item_config(args, name, kw)
        say(f"== {label}")
        outcome = train(cfg, place, progress=not args.no_progress, group=group)
        res = summarize(outcome)
        res["label"] = label
        if args.check:     # the reference trains once: its step is cached for the process (run/reference.py)
            res["check"] = check_run(outcome, group)
        results.append(res)
        if not lead:
            continue
        print(train_report(res))
        if args.check:
            print(check_line(res["check"]))
        stem = name if sum(1 for n, _ in items if n == name) == 1 else label.replace(":", "_").replace("=", "")
        write_json_atomic(out / f"{stem}.json", {**res, "compare_run": run_id})
        write_measured_trace(outcome, out / f"{stem}_trace.json")   # ui.perfetto.dev: the charted step
        if outcome.timeline is not None:
            measured = measured_with_recompute(outcome)
            draw_gantt(measured, out / f"{stem}_measured.png", time_unit="s",
                       title=f"{label}: measured (recompute: its measured share of B)")
            timelines.append(measured)
            labels.append(f"{label}: measured")       # the title adds the iteration time
        if outcome.simulated is not None:     # with the optimizer step as measured: the simulated iteration
            draw_gantt(simulated_with_optimizer(outcome), out / f"{stem}_simulated.png", time_unit="s",
                       title=f"{label}: simulated from measured costs")
    if not lead:
        return 0
    if timelines:
        draw_gantts(timelines, out / "measured.png", labels, time_unit="s")
    table = compare_report(results)
    print()
    print(table)
    write_text_atomic(out / "table.txt", table + "\n")
    write_json_atomic(out / "compare.json", {"format": "obscura-compare/1", "compare_run": run_id,
                                             "runs": results})
    return 1 if args.check and not all(r["check"]["equal"] for r in results) else 0
