"""A training run summarised as one JSON-ready dict (format obscura-train/1), from
a TrainOutcome whose per-stage facts were gathered from every process.

`stages` holds one row per MODEL stage (what the engine compiles and measures);
`pipeline_devices` one row per pipeline device (a row of the schedule). They differ
for chunked schedules (interleaved, zb-v, obscura-interleaved: a device runs several
model stages). A Timeline's statistics are per pipeline device, so a stage row takes
its simulated peak from its own ops (schedules.memory's accounting over that stage
alone), and its measured idle figures only when it has its pipeline device alone."""
from __future__ import annotations

import os
import statistics

import numpy as np

from obscura_jax.observe.step_time import median_step, spread, timed
from obscura_jax.runtime.residuals import HOST_MEMORY_KINDS
from schedules.actions import COMPUTE, KINDS
from schedules.ir import Kind
from schedules.simulator import iteration_time, on_one_device, stage_memory
from schedules.timeline import Timeline, with_recompute_shares


def cpu_note(devices) -> str | None:
    """One line when emulated CPU devices outnumber the host's cores (their stages
    then take turns on the cores, and measured times are not a pipeline's)."""
    cpus = {d.id for d in devices if d.platform == "cpu"}
    cores = os.cpu_count() or 1
    if len(cpus) <= cores:
        return None
    return (f"{len(cpus)} emulated CPU devices share {cores} CPU core{'s' if cores > 1 else ''}: stages take "
            "turns on the cores, so measured times overstate what a real pipeline would take")


def device_name(device, processes: int) -> str:
    """'cpu:0' in a run of one process; 'p1:cpu:0' (process, platform, the device's id
    in its process) in a run of several, where JAX's global ids (cpu:2048) say little."""
    if processes <= 1:
        return str(device)
    local = device.local_hardware_id       # a GPU's number on its host
    if device.platform == "cpu" or local is None:   # emulated CPU devices: their place in the process's list
        import jax  # lazy: loaded already by the run being summarised
        local = sorted(d.id for d in jax.devices() if d.process_index == device.process_index).index(device.id)
    return f"p{device.process_index}:{str(device).rsplit(':', 1)[0]}:{local}"


def mesh_name(mesh, processes: int) -> str:
    """A stage mesh as the summary names it: its device, or its devices and D x T."""
    if processes <= 1:
        return mesh.describe()
    if mesh.single:
        return device_name(mesh.lead, processes)
    return f"[{', '.join(device_name(d, processes) for d in mesh.devices)}] ({mesh.data} data x {mesh.tensor} tensor)"


def loss_curve(out) -> dict:
    """`steps`, `losses`, `step_seconds` of the whole run: a resumed run's earlier steps
    from its checkpoint directory's metrics log, then its own; `before_resume` marks
    the earlier ones."""
    earlier = [e for e in out.before_resume if e["step"] <= out.start_step]
    return {"steps": [e["step"] for e in earlier] + [s.step for s in out.steps],
            "losses": [e["loss"] for e in earlier] + [s.loss for s in out.steps],
            "step_seconds": [e["seconds"] for e in earlier] + [s.seconds for s in out.steps],
            "before_resume": [True] * len(earlier) + [False] * len(out.steps)}


def summarize(out) -> dict:
    """Everything a person or a script wants from a run, JSON-ready.
    Long: one flat dict, built field by field."""
    run, pipe = out.config, out.pipeline
    shape = pipe.shape
    logs = out.steps
    # The one measured number (obscura_jax.observe.step_time): the lower-median timed step,
    # which is the step the timeline shows.
    timed_logs = timed(logs, run.warmup_steps)
    chosen = median_step(timed_logs)
    iteration = out.chart_seconds if out.chart_seconds is not None else (chosen.seconds if chosen else None)
    step_time = ({"timed_steps": len(timed_logs), **spread([s.seconds for s in timed_logs])}
                 if timed_logs else None)
    sim = simulated_with_optimizer(out)
    charted = measured_with_recompute(out)
    measured = out.measured
    update_time = out.update_seconds
    simulated_time = None
    if sim is not None:
        # The simulator covers the schedule's actions; the optimizer step after them
        # is added as measured in the recorded iteration.
        simulated_time = sim.makespan + (update_time or 0.0)
    planned = run.planned_peaks()
    devices = pipe.placement.devices
    every_device = sorted({d for s in range(pipe.schedule.num_stages) for d in pipe.placement.mesh(s).devices},
                          key=lambda d: d.id)
    schedule = pipe.schedule
    where = schedule.stage_to_device
    alone_on_row = [where.count(where[s]) == 1 for s in range(schedule.num_stages)]
    # Per model stage: each stage's ops accounted alone (identity stage -> device map).
    sim_own = (Timeline.from_ops(schedule.num_stages, sim.ops, origin=0.0,
                                 memory=stage_memory(schedule, measured.costs)) if sim is not None else None)
    stages = []
    for s, facts in enumerate(out.stage_facts):
        row = dict(facts["row"])
        weight, live = facts["weight_bytes"], facts["ledger_peak"]
        accounted = weight + live + facts["temp_bytes"]
        device_peak = facts["device_peak"]
        # memory_stats is per device: it is this stage's peak only if no other stage shares it.
        alone = sum(d.id == devices[s].id for d in devices) == 1
        own_peak = device_peak if alone else None
        row.update({"process": facts["process"], "device": mesh_name(pipe.placement.mesh(s), pipe.group.size),
                    "pipeline_device": where[s], "weight_bytes": weight,
                    "peak_activation_bytes": live, "peak_host_bytes": facts.get("ledger_host_peak", 0),
                    "temp_bytes": facts["temp_bytes"], "accounted_peak_bytes": accounted,
                    "device_peak_bytes": device_peak,
                    "peak_bytes": own_peak if own_peak is not None else accounted,
                    "peak_source": "memory_stats" if own_peak is not None else "accounting"})
        if sim is not None:
            row["simulated_peak_bytes"] = measured.costs.weight_bytes[s] + sim_own.stages[s].peak_activation_bytes
        if planned is not None:
            # The plan predicts weights + kept activations + the profile's XLA scratch:
            # against the same accounting of this run (its programs' own scratch).
            row["planned_peak_bytes"] = planned[s]
            row["planned_vs_measured_bytes"] = planned[s] - accounted
        if out.timeline is not None:
            row["measured"] = stage_measured(out.timeline, s, alone_on_row[s])
        stages.append(row)
    dispatch = {k: (1e6 * statistics.mean(v) if v else None) for k, v in out.dispatch.items()}
    all_d = sorted(x for v in out.dispatch.values() for x in v)
    dispatch["all"] = 1e6 * statistics.mean(all_d) if all_d else None
    # The mean includes back-pressure (a full device queue blocks dispatch); the low
    # percentiles are the host's own cost per action.
    dispatch["all_median"] = 1e6 * statistics.median(all_d) if all_d else None
    dispatch["all_p10"] = 1e6 * all_d[len(all_d) // 10] if all_d else None
    swap = dict(out.swap_counters)
    if out.timeline is not None:
        for kind, key in ((Kind.SO, "out"), (Kind.SI, "in")):
            ops = [o for o in out.timeline.ops if o.kind is kind]
            busy = sum(o.duration for o in ops)
            nbytes = swapped_bytes_per_iteration(pipe.schedule, out.stage_facts, kind)
            swap[f"measured_gbps_{key}"] = (nbytes / busy / 1e9) if busy > 0 and nbytes else None
        swap["overlap_with_compute"] = swap_overlap(out.timeline, devices)
    if measured is not None:
        swap["standalone_gbps_out"] = _gbps(measured.host_bandwidth_out)
        swap["standalone_gbps_in"] = _gbps(measured.host_bandwidth_in)
    shared = pipe.placement.shared
    result = {
        "format": "obscura-train/1", "model": run.model, "schedule": pipe.schedule.name,
        "num_stages": pipe.schedule.num_stages, "num_microbatches": pipe.schedule.num_microbatches,
        "micro_batch_size": shape.micro_batch_size, "seq_len": shape.seq_len, "data": run.data,
        "policy": run.policy if isinstance(run.policy, str) else run.policy.name,
        "offload": offload_summary(pipe, stages, every_device),
        "adjusted_stages": list(pipe.schedule.adjusted_stages),
        "weight_grad": run.weight_grad_options.to_json(),
        "devices": [device_name(d, pipe.group.size) for d in devices], "placement_note": pipe.placement.note,
        "shared_devices": shared, "processes": pipe.group.size, "start_step": out.start_step,
        **loss_curve(out),
        "layout": {"data": run.data_parallel, "tensor": run.tensor_parallel, "devices": len(every_device),
                   "stage_meshes": [mesh_name(pipe.placement.mesh(s), pipe.group.size)
                                    for s in range(schedule.num_stages)]},
        "iteration_time": iteration, "step_time": step_time, "cpu_note": cpu_note(every_device),
        "timeline_iteration_time": out.chart_seconds, "timeline_step": out.chart_step,
        "bubble_fraction": charted.bubble_fraction if charted is not None else None,
        "recompute_fraction": charted.recompute_fraction if charted is not None else None,
        "simulated_bubble_fraction": sim.bubble_fraction if sim is not None else None,
        "simulated_recompute_fraction": sim.recompute_fraction if sim is not None else None,
        "simulated_iteration_time": simulated_time,
        "simulated_makespan": sim.makespan if sim is not None else None,
        "optimizer_time": update_time,
        "simulated_over_measured": (simulated_time / iteration) if simulated_time and iteration else None,
        "tokens_per_second": shape.tokens_per_step / iteration if iteration else None,
        "dispatch_us": dispatch, "swap": swap, "stages": stages,
        "pipeline_devices": pipeline_devices(schedule, measured, sim, out.timeline),
        "costs": measured.to_json() if measured is not None else None,
        "timeline": measured_step(out).to_json() if out.timeline is not None else None,
        "simulated_timeline": sim.to_json() if sim is not None else None,
        "memory": out.memory.to_json(out.device_peaks) if out.memory is not None else None,
    }
    # A device that runs stages the schedule puts on different pipeline devices (more
    # stages than devices, one GPU): the serial estimate. Not for a chunked schedule
    # placed as written (its simulation already shares the devices).
    if shared and not placed_as_written(where, [d.id for d in devices]) and measured is not None:
        # One device runs every stage's work in turn: the simulator on one device,
        # with the optimizer step measured in this run (spread over the stages by weight).
        c = measured.costs
        total = sum(c.weight_bytes)
        if update_time and total:
            c = c.with_(optimizer=tuple(update_time * w / total for w in c.weight_bytes))
        result["simulated_serial_time"] = iteration_time(on_one_device(pipe.schedule, c), c)
    return result


CPU_HOST_NOTE = ("on CPU devices JAX's device and pinned_host memories are both this machine's RAM: residual "
                 "bytes are split by the memory kind JAX reports for each leaf, not by hardware")


def offload_summary(pipe, stages: list[dict], devices) -> dict:
    """The run's offloading: the ops the stages' policies offload, the host memory
    kinds their residuals are in (as JAX reports them), the bytes moved to host and
    back per iteration, and the stages' host peaks summed (offloaded and swapped-out
    residuals; device peaks count none of them)."""
    kinds = sorted({k for st in stages for k, n in st["residual_memory_kinds"].items()
                    if n and k in HOST_MEMORY_KINDS})
    cpu = any(d.platform == "cpu" for d in devices)
    return {"ops": sorted({op for pol in pipe.policies for op in pol.offload}), "memory_kinds": kinds,
            "to_host_bytes_per_iteration": sum(st["offload_bytes_per_iteration"]["to_host"] for st in stages),
            "from_host_bytes_per_iteration": sum(st["offload_bytes_per_iteration"]["from_host"] for st in stages),
            "peak_host_bytes": sum(st["peak_host_bytes"] for st in stages),
            "note": CPU_HOST_NOTE if cpu and kinds else None}


def measured_with_recompute(outcome) -> Timeline | None:
    """The run's measured timeline with each backward's recompute share marked (from
    the costs measured in the same run: a measured backward cannot be seen inside)
    and ending with the measured optimizer step, so it spans the charted step's wall
    time (the iteration time): for drawing, traces and the bubble and recompute
    fractions."""
    tl, measured = measured_step(outcome), outcome.measured
    if tl is None or measured is None:
        return tl
    sched = outcome.pipeline.schedule
    shares = [measured.costs.recompute_share(s, spec.adjusted, any(sched.effective_kind(a) is Kind.I
                                                                   for a in spec.actions))
              for s, spec in enumerate(sched.stages)]
    return with_recompute_shares(tl, shares)


def measured_step(outcome) -> Timeline | None:
    """The run's measured timeline ending with the measured optimizer step: it spans
    the charted step's wall time, the measured iteration time."""
    tl = outcome.timeline
    if tl is None or outcome.chart_seconds is None:
        return tl
    return tl.with_optimizer(outcome.update_seconds or 0.0, end=outcome.chart_seconds)


def simulated_with_optimizer(outcome) -> Timeline | None:
    """The simulation on the run's measured costs, ending with the optimizer step as
    measured in the charted step (every device steps for that long): it spans the
    simulated iteration time the report prints."""
    sim = outcome.simulated
    if sim is None or outcome.update_seconds is None:
        return sim
    return sim.with_optimizer(outcome.update_seconds)


def placed_as_written(stage_to_device, device_ids) -> bool:
    """Whether the stages' devices are the schedule's pipeline devices one to one
    (a chunked schedule on as many devices as it has rows), so the simulation
    already shares each device the way the run does."""
    pairs = set(zip(stage_to_device, device_ids))
    return len(pairs) == len({d for d, _ in pairs}) == len({j for _, j in pairs})


MEASURED_KEYS = ("compute", "forward_bubble", "backward_bubble", "comm_wait", "swap")


def stage_measured(timeline: Timeline, stage: int, alone: bool) -> dict:
    """Measured figures of one model stage in the recorded step: its pipeline device's
    statistics when the stage has that device alone; otherwise its own compute time
    (F, B, I, W) and None for the idle figures, which belong to the device."""
    if alone:
        return {k: getattr(timeline.stages[timeline.device_of(stage)], k) for k in MEASURED_KEYS}
    own = timeline.stage_ops(stage)
    return {"compute": sum(o.duration for o in own if KINDS[o.kind].lane == COMPUTE),
            "forward_bubble": None, "backward_bubble": None, "comm_wait": None,
            "swap": sum(o.duration for o in own if KINDS[o.kind].lane != COMPUTE)}


def pipeline_devices(schedule, measured, sim, timeline) -> list[dict]:
    """One row per pipeline device (schedule row): its model stages, the simulated
    peak (their weights + the device's simulated activation peak) and the measured
    statistics of the recorded step."""
    rows = []
    for d in range(schedule.num_devices):
        mine = schedule.stages_on(d)
        row = {"device": d, "stages": list(mine)}
        if sim is not None:
            row["simulated_peak_bytes"] = (sum(measured.costs.weight_bytes[s] for s in mine)
                                           + sim.stages[d].peak_activation_bytes)
        if timeline is not None:
            row["measured"] = {k: getattr(timeline.stages[d], k) for k in MEASURED_KEYS}
        rows.append(row)
    return rows


def _gbps(bytes_per_second: float):
    return bytes_per_second / 1e9 if bytes_per_second and np.isfinite(bytes_per_second) else None


def swapped_bytes_per_iteration(schedule, stage_facts: list[dict], kind: Kind) -> int:
    """Bytes one iteration's SO (or SI) actions move."""
    return sum(sum(1 for a in spec.actions if a.kind is kind) * stage_facts[s]["swapped_bytes_per_block"]
               for s, spec in enumerate(schedule.stages))


def swap_overlap(timeline: Timeline, devices) -> float | None:
    """Share of the measured SO/SI time (the host lanes) that ran while its device
    was computing: running any action of the compute lane (schedules.actions.KINDS:
    F, B, I, W). An in-run view of how well copies hide; the no-swap comparison in
    experiments.benchmark is the end-to-end one."""
    busy: dict[int, list[tuple[float, float]]] = {}
    for o in timeline.ops:
        if KINDS[o.kind].lane == COMPUTE:
            busy.setdefault(devices[o.stage].id, []).append((o.start, o.end))
    merged = {}
    for dev, spans in busy.items():
        spans.sort()
        out = [list(spans[0])]
        for a, b in spans[1:]:
            if a <= out[-1][1]:
                out[-1][1] = max(out[-1][1], b)
            else:
                out.append([a, b])
        merged[dev] = out
    total = hidden = 0.0
    for o in timeline.ops:
        if KINDS[o.kind].lane == COMPUTE or o.end <= o.start:
            continue
        total += o.end - o.start
        for a, b in merged.get(devices[o.stage].id, ()):
            hidden += max(0.0, min(b, o.end) - max(a, o.start))
    return hidden / total if total > 0 else None
