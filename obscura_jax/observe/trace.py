"""A measured run as a Perfetto trace, and its device kernels under jax.profiler.

`measured_trace(outcome)` is the trace-event JSON (schedules.formats.trace) of the step
the run charts (obscura_jax.observe.step_time: the lower-median timed step, whose wall
time is the run's measured iteration time): one track per stage, its swap-out and
swap-in tracks, the transfers arriving for it, each backward's recompute nested at
its measured share (schedules.timeline.with_recompute_shares), and an "iteration"
process holding the step and its optimizer step, so the trace spans the step
exactly: `otherData.makespan_s` == the report's measured iteration time.

`xla_trace(directory, group)` wraps the timed steps in `jax.profiler.trace`: the
device kernels (XLA's own trace, for TensorBoard's profile plugin or Perfetto).

`measured_timeline` turns the measured ops (events.infer_ops) into a Timeline (the trainer's).
"""
from __future__ import annotations

import os
from pathlib import Path

import jax

from obscura_jax.observe.summary import measured_with_recompute
from schedules.actions import COMPUTE_KINDS
from schedules.ir import Kind
from schedules.formats.jsonio import write_json_atomic
from schedules.timeline import OpRecord, Timeline
from schedules.formats.trace import Iteration, Transfer, trace_events


def measured_trace(outcome) -> dict | None:
    """The trace-event JSON of a TrainOutcome's charted step (None: nothing recorded)."""
    tl = measured_with_recompute(outcome)
    if tl is None:
        return None
    transfers = [Transfer(t.message, t.src, t.dst, t.start, t.end) for t in outcome.transfers]
    iteration = None
    if outcome.chart_seconds is not None:
        iteration = Iteration(outcome.chart_step, outcome.chart_seconds,
                              max(0.0, outcome.chart_seconds - (outcome.update_seconds or 0.0)))
    return with_offload(trace_events(tl, transfers=transfers, iteration=iteration), outcome.stage_facts)


def with_offload(data: dict, stage_facts: list[dict]) -> dict:
    """The trace with its stages' offloading (a policy's offload set): each F's
    `to_host_bytes`, each B, I and W's `from_host_bytes` in its args, and per stage
    the residual bytes per micro-batch on device and on host in `otherData.offload`.
    Unchanged for a run that offloads nothing."""
    rows = [f["row"] for f in stage_facts]
    host = [r.get("residual_host_bytes_per_microbatch", 0) for r in rows]
    if not any(host):
        return data
    compute = {k.value for k in COMPUTE_KINDS}
    per_action = []
    for s, row in enumerate(rows):
        kinds = [e["cat"] for e in data["traceEvents"] if e.get("ph") == "X" and e.get("args", {}).get("stage") == s]
        backwards, weights = sum(k in ("B", "I") for k in kinds), kinds.count("W")
        traffic = row["offload_bytes_per_iteration"]["from_host"] - backwards * host[s]
        per_action.append({"F": ("to_host_bytes", host[s]), "B": ("from_host_bytes", host[s]),
                           "I": ("from_host_bytes", host[s]),
                           "W": ("from_host_bytes", traffic // weights if weights else 0)})
    for e in data["traceEvents"]:
        if e.get("ph") == "X" and e.get("cat") in compute:
            key, nbytes = per_action[e["args"]["stage"]][e["cat"]]
            e["args"][key] = nbytes
    data["otherData"]["offload"] = {
        "residual_device_bytes_per_microbatch": [r["residual_bytes_per_microbatch"] for r in rows],
        "residual_host_bytes_per_microbatch": host,
        "memory_kinds": sorted({k for r in rows for k, n in r["residual_memory_kinds"].items() if n})}
    return data


def write_measured_trace(outcome, path: str | os.PathLike) -> bool:
    """Write the charted step's trace to `path`; False when the run recorded none."""
    data = measured_trace(outcome)
    if data is None:
        return False
    write_json_atomic(path, data)
    return True


def xla_trace(directory, group):
    """`jax.profiler.trace` into `directory` (process-N under it with several
    processes), entered; the caller exits it after the timed steps."""
    path = Path(directory) if group.size == 1 else Path(directory) / f"process-{group.rank}"
    path.mkdir(parents=True, exist_ok=True)
    ctx = jax.profiler.trace(str(path), create_perfetto_trace=True)
    ctx.__enter__()
    return ctx


def xla_trace_files(directory) -> list[str]:
    """The files jax.profiler wrote under `directory`, sorted."""
    root = Path(directory)
    return sorted(str(p) for p in root.rglob("*") if p.is_file()) if root.is_dir() else []


def measured_timeline(pipe, ops, stage_facts: list[dict]) -> Timeline:
    """One iteration's measured ops (events.infer_ops: every process's, relative to
    the step's start) -> a Timeline with the simulator's statistics."""
    records = []
    for op in ops:
        a = op.action
        nbytes = None  # F: the stage's kept bytes; SO/SI: what the leaf choice really moved
        if a.kind in (Kind.SO, Kind.SI):
            nbytes = float(stage_facts[a.stage]["swapped_bytes_per_block"])
        records.append(OpRecord.of(a, op.start, op.end, 0.0, nbytes))
    kept = [float(f["residual_bytes"]) for f in stage_facts]
    return Timeline.from_ops(pipe.schedule.num_stages, records, kept, name=f"{pipe.schedule.name} (measured)",
                             stage_to_device=pipe.schedule.stage_to_device, origin=0.0)
