"""The training loop: build the pipeline, measure its costs, run the steps, record
a measured timeline, checkpoint, and summarise everything as one JSON-able dict."""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field

import jax
import numpy as np

import schedules
from obscura_jax.checkpoint import PipelineCheckpointer
from obscura_jax.data import BatchShape, open_data
from obscura_jax.engine import Pipeline, build_pipeline
from obscura_jax.events import EventRecorder, infer_ops
from obscura_jax.executor import make_optimizer
from obscura_jax.measure import MeasuredCosts, measure_costs, tree_bytes
from obscura_jax.placement import Placement
from obscura_jax.run_config import RunConfig
from obscura_jax.swap import choose_leaves
from schedules.ir import Kind
from schedules.timeline import OpRecord, Timeline


@dataclass
class StepLog:
    step: int
    loss: float
    seconds: float
    recorded: bool


@dataclass
class TrainOutcome:
    config: RunConfig
    pipeline: Pipeline
    states: list
    steps: list[StepLog] = field(default_factory=list)
    measured: MeasuredCosts | None = None
    simulated: Timeline | None = None
    timeline: Timeline | None = None
    dispatch: dict = field(default_factory=dict)
    ledger_peak: list[int] | None = None
    device_peaks: list | None = None
    swap_counters: dict = field(default_factory=dict)
    start_step: int = 0
    update_seconds: float | None = None   # optimizer step of all stages, timed in the recorded step

    def stage_params(self) -> dict:
        """The whole model's params (unit name -> tree), gathered to host."""
        out = {}
        for st in self.states:
            out.update(jax.device_get(st.params))
        return out


def identity_of(run: RunConfig, partition, schedule) -> dict:
    """What a checkpoint must share with a run resuming it (the schedule may differ)."""
    return {"model": run.model, "units": [list(r) for r in partition], "seed": run.seed,
            "data": run.data, "micro_batch_size": run.micro_batch_size, "seq_len": run.seq_len,
            "microbatches": schedule.num_microbatches,
            "optimizer": [run.optimizer, run.learning_rate, run.weight_decay]}


def _device_peak(device):
    stats = device.memory_stats()
    if not stats or "peak_bytes_in_use" not in stats:
        return None
    return int(stats["peak_bytes_in_use"])


def train(run: RunConfig, placement_fn, *, progress: bool = False, log=print) -> TrainOutcome:
    """placement_fn(num_stages) -> Placement (devices are chosen once p is known)."""
    cfg = run.model_config()
    schedule, partition = run.resolve(cfg)
    placement: Placement = placement_fn(schedule.num_stages)   # its note is in the report
    shape = BatchShape(schedule.num_microbatches, run.micro_batch_size, run.seq_len)
    data = open_data(run.data, model_vocab=cfg.vocab_size, seed=run.seed, dtype=run.data_dtype)
    optimizer = make_optimizer(run.optimizer, run.learning_rate, run.weight_decay)
    identity = identity_of(run, partition, schedule)
    ckpt = PipelineCheckpointer(run.checkpoint_dir, resume=run.resume) if run.checkpoint_dir else None
    start = ckpt.resumable_step(identity) if ckpt is not None else None
    if start is not None and start >= run.steps:
        raise ValueError(f"checkpoint in {run.checkpoint_dir} is at step {start}, "
                         f"nothing to do for --steps {run.steps}")

    pipe = build_pipeline(cfg, schedule, partition, run.policy, placement, shape, optimizer,
                          schedules.issue_order(schedule), swap_mechanism=run.swap_mechanism,
                          swap_enabled=run.swap_enabled)
    states = pipe.init_state(run.seed)
    outcome = TrainOutcome(run, pipe, states)
    if start is not None:
        tree = ckpt.restore([(st.params, st.opt_state) for st in states], start)
        for st, (params, opt_state) in zip(states, tree):
            st.params, st.opt_state = params, opt_state
        outcome.start_step = start
        log(f"resumed from {ckpt.directory} at step {start}")
    before_peaks = [_device_peak(d) for d in placement.devices]

    if run.measure_costs:
        outcome.measured = measure_costs(pipe, states, run.policy, reps=run.cost_reps)
        outcome.simulated = schedules.simulate(schedule, outcome.measured.costs)
        pipe.executor.order = list(schedules.issue_order(schedule, outcome.measured.costs))

    bar = None
    if progress:
        from tqdm import tqdm
        bar = tqdm(total=run.steps, initial=outcome.start_step, desc=schedule.name, unit="step",
                   leave=True, dynamic_ncols=True, disable=None)  # None: off when not a TTY
    peak_live = [0] * schedule.num_stages
    last = run.steps - 1
    recorder = None
    try:
        for step in range(outcome.start_step, run.steps):
            tokens, targets = data.microbatches(step, shape)
            record = run.record_timeline and step == last
            recorder = EventRecorder(pipe.executor.devices).__enter__() if record else None
            t0 = time.perf_counter()
            result = pipe.executor.run_actions(states, tokens, targets, recorder=recorder,
                                               track_memory=True)
            if recorder is not None:  # the recorded step also times the optimizer step alone
                jax.block_until_ready([st.grads for st in states])
                t_actions = time.perf_counter()
            pipe.executor.apply_updates(states)
            jax.block_until_ready([st.params for st in states])
            losses = np.asarray(result.losses)
            seconds = time.perf_counter() - t0
            if recorder is not None:
                outcome.update_seconds = seconds - (t_actions - t0)
                events, recorder = recorder.close(), None
                outcome.timeline = measured_timeline(pipe, events)
            loss = float(losses.mean())
            if not np.isfinite(loss):
                raise ValueError(f"loss became {loss} at step {step + 1}")
            outcome.steps.append(StepLog(step + 1, loss, seconds, record))
            for k, v in result.dispatch_seconds.items():
                outcome.dispatch.setdefault(k, []).extend(v)
            peak_live = [max(a, b) for a, b in zip(peak_live, result.ledger.peak)]
            if bar is not None:
                bar.update(1)
                bar.set_postfix(loss=f"{loss:.4f}", tok_s=f"{shape.tokens_per_step / seconds:,.0f}")
            done = step + 1
            if ckpt is not None and ((run.checkpoint_every and done % run.checkpoint_every == 0)
                                     or done == run.steps):
                ckpt.save(done, [(st.params, st.opt_state) for st in states], identity)
    finally:
        if recorder is not None:  # a step failed while recording: stop the waiter threads
            recorder.close()
        if bar is not None:
            bar.close()
        if ckpt is not None:
            ckpt.close()
    outcome.ledger_peak = peak_live
    after = [_device_peak(d) for d in placement.devices]
    outcome.device_peaks = [None if a is None or (b is not None and a <= b) else a
                            for a, b in zip(after, before_peaks)]
    outcome.swap_counters = vars(pipe.executor.swap.counters).copy()
    return outcome


def measured_timeline(pipe: Pipeline, events) -> Timeline:
    """Events of one iteration -> a Timeline with the simulator's statistics."""
    ops = infer_ops(events, pipe.schedule.num_stages, pipe.executor.order)
    moved = [_swapped_bytes_per_block(pipe, s) for s in range(len(pipe.programs))]
    records = []
    for op in ops:
        a = op.action
        nbytes = None  # F: the stage's kept bytes; SO/SI: what the leaf choice really moved
        if a.kind in (Kind.SO, Kind.SI):
            nbytes = float(moved[a.stage])
        records.append(OpRecord.of(a, op.start, op.end, 0.0, nbytes))
    kept = [float(p.residual_bytes) for p in pipe.programs]
    return Timeline.from_ops(pipe.schedule.num_stages, records, kept,
                             name=f"{pipe.schedule.name} (measured)")


def summarize(out: TrainOutcome) -> dict:
    """Everything a person or a script wants from a run, JSON-ready."""
    run, pipe = out.config, out.pipeline
    shape = pipe.shape
    logs = out.steps
    timed = [s for s in logs[run.warmup_steps:] if not s.recorded] or logs[run.warmup_steps:] or logs
    iteration = statistics.median(s.seconds for s in timed) if timed else None
    recorded = [s.seconds for s in logs if s.recorded]
    sim = out.simulated
    measured = out.measured
    update_time = out.update_seconds
    simulated_time = None
    if sim is not None:
        # The simulator covers the schedule's actions; the optimizer step after them
        # is added as measured in the recorded iteration.
        simulated_time = sim.makespan + (update_time or 0.0)
    planned = run.planned_peaks()
    stages = []
    for s, row in enumerate(pipe.stage_rows()):
        st = out.states[s]
        weight = tree_bytes(st.params) + tree_bytes(st.grads) + tree_bytes(st.opt_state)
        prog = pipe.programs[s]
        accounted = weight + (out.ledger_peak[s] if out.ledger_peak else 0) + prog.temp_bytes
        device_peak = out.device_peaks[s] if out.device_peaks else None
        # memory_stats is per device: it is this stage's peak only if no other stage shares it.
        alone = sum(d.id == prog.device.id for d in pipe.placement.devices) == 1
        own_peak = device_peak if alone else None
        row.update({"weight_bytes": weight, "peak_activation_bytes": out.ledger_peak[s] if out.ledger_peak else 0,
                    "temp_bytes": prog.temp_bytes, "accounted_peak_bytes": accounted,
                    "device_peak_bytes": device_peak,
                    "peak_bytes": own_peak if own_peak is not None else accounted,
                    "peak_source": "memory_stats" if own_peak is not None else "accounting"})
        if sim is not None:
            row["simulated_peak_bytes"] = measured.costs.weight_bytes[s] + sim.stages[s].peak_activation_bytes
        if planned is not None:
            # The plan predicts weights + kept activations; XLA's scratch is not in the
            # profile format (plan with --reserve to leave room for it).
            row["planned_peak_bytes"] = planned[s]
            row["planned_vs_measured_bytes"] = planned[s] - (weight + row["peak_activation_bytes"])
        if out.timeline is not None:
            ts = out.timeline.stages[s]
            row["measured"] = {k: getattr(ts, k) for k in ("compute", "forward_bubble", "backward_bubble",
                                                           "comm_wait", "swap")}
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
            nbytes = _swapped_bytes_per_iteration(pipe, kind)
            swap[f"measured_gbps_{key}"] = (nbytes / busy / 1e9) if busy > 0 and nbytes else None
        swap["overlap_with_compute"] = _swap_overlap(out.timeline, pipe.placement.devices)
    if measured is not None:
        swap["standalone_gbps_out"] = _gbps(measured.host_bandwidth_out)
        swap["standalone_gbps_in"] = _gbps(measured.host_bandwidth_in)
    shared = pipe.placement.shared
    result = {
        "format": "obscura-train/1", "model": run.model, "schedule": pipe.schedule.name,
        "num_stages": pipe.schedule.num_stages, "num_microbatches": pipe.schedule.num_microbatches,
        "micro_batch_size": shape.micro_batch_size, "seq_len": shape.seq_len, "data": run.data,
        "policy": run.policy, "adjusted_stages": list(pipe.schedule.adjusted_stages),
        "devices": [str(d) for d in pipe.placement.devices], "placement_note": pipe.placement.note,
        "shared_devices": shared, "start_step": out.start_step,
        "steps": [s.step for s in logs], "losses": [s.loss for s in logs],
        "step_seconds": [s.seconds for s in logs],
        "iteration_time": iteration, "timeline_iteration_time": recorded[0] if recorded else None,
        "simulated_iteration_time": simulated_time,
        "simulated_makespan": sim.makespan if sim is not None else None,
        "optimizer_time": update_time,
        "simulated_over_measured": (simulated_time / iteration) if simulated_time and iteration else None,
        "tokens_per_second": shape.tokens_per_step / iteration if iteration else None,
        "dispatch_us": dispatch, "swap": swap, "stages": stages,
        "costs": measured.to_json() if measured is not None else None,
        "timeline": out.timeline.to_json() if out.timeline is not None else None,
        "simulated_timeline": sim.to_json() if sim is not None else None,
    }
    if shared and measured is not None:
        c = measured.costs
        # One device runs every stage's work in turn: no pipeline overlap is possible.
        result["simulated_serial_time"] = sum(
            m * (c.fwd[s] + c.backward_time(s, spec.adjusted))
            for s, spec in enumerate(pipe.schedule.stages)
            for m in [pipe.schedule.num_microbatches]) + (update_time or 0.0)
    return result


def _gbps(bytes_per_second: float):
    return bytes_per_second / 1e9 if bytes_per_second and np.isfinite(bytes_per_second) else None


def _swapped_bytes_per_block(pipe: Pipeline, stage: int) -> int:
    """Bytes one SO (or SI) of `stage` moves, from the leaf choice rule."""
    if not pipe.executor.swap_enabled:
        return 0
    sizes = pipe.programs[stage].residual_leaf_bytes
    return sum(sizes[i] for i in choose_leaves(sizes, pipe.schedule.stages[stage].swap_fraction))


def _swapped_bytes_per_iteration(pipe: Pipeline, kind: Kind) -> int:
    """Bytes one iteration's SO (or SI) actions move."""
    return sum(sum(1 for a in spec.actions if a.kind is kind) * _swapped_bytes_per_block(pipe, s)
               for s, spec in enumerate(pipe.schedule.stages))


def _swap_overlap(timeline: Timeline, devices) -> float | None:
    """Share of the measured SO/SI time that ran while its device was computing
    (an in-run view of how well copies hide; the no-swap comparison in
    obscura_jax.benchmark is the end-to-end one)."""
    busy: dict[int, list[tuple[float, float]]] = {}
    for o in timeline.ops:
        if o.kind in (Kind.F, Kind.B):
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
        if o.kind not in (Kind.SO, Kind.SI) or o.end <= o.start:
            continue
        total += o.end - o.start
        for a, b in merged.get(devices[o.stage].id, ()):
            hidden += max(0.0, min(b, o.end) - max(a, o.start))
    return hidden / total if total > 0 else None
