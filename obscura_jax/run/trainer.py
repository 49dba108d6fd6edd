"""The training loop: build the pipeline, measure its costs, run the steps, record
a measured timeline, checkpoint; in one process or several (a ProcessGroup).

With several processes every process runs this same function for its own stages
and meets the others at fixed points, in the same order on all of them:

    set-up      schedule + order + transfer plan checked equal everywhere (hash),
                transfers warmed up, state initialised or restored
    costs       each process times its stages; all agree on one StageCosts, then
                on the issue order computed from it (hash again)
    each step   every process's workers run their rows; the last stage's losses
                are shared, so every process sees (and stops on) the same loss
    the end     per-stage facts and the recorded step's events (on process 0's
                clock) are gathered, so every process can summarise the whole run
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import jax
import numpy as np
from tqdm import tqdm

import schedules
from obscura_jax.runtime.stage_mesh import device_bytes, local_value
from obscura_jax.checkpoints.checkpointer import open_checkpointer, restore_with_fallback
from obscura_jax.checkpoints.stop import share_step_end, stop_after
from obscura_jax.checkpoints.directory import MetricsLog, warn
from obscura_jax.run.data import BatchShape, open_data
from obscura_jax.runtime.pipeline import Pipeline, build_pipeline
from obscura_jax.errors import RunError
from obscura_jax.observe.events import (EventRecorder, events_to_json, infer_ops, infer_transfers, merge_events,
                                merge_transfers, transfers_to_json)
from obscura_jax.cli import interrupt
from obscura_jax.runtime.executor import make_optimizer
from obscura_jax.run.memory_check import RunMemory, device_name, device_peak
from obscura_jax.runtime.out_of_memory import DeviceOutOfMemory, naming
from obscura_jax.observe.measure import CostTiming, MeasuredCosts, combine, measure_boundaries, measure_stages
from obscura_jax.runtime.placement import Placement, place_schedule
from obscura_jax.run.plan_run import plan_issue_order
from obscura_jax.processes.process_group import SINGLE, ProcessGroup
from obscura_jax.run.agreement import agreed, check_order, identity_of
from obscura_jax.run.run_config import RunConfig
from obscura_jax.observe.step_time import first_timed_step, median_step, timed
from obscura_jax.runtime.swap import choose_leaves
from obscura_jax.observe.trace import measured_timeline, xla_trace
from schedules.timeline import Timeline


@dataclass
class StepLog:
    step: int
    loss: float
    seconds: float
    recorded: bool


@dataclass
class RecordedStep:
    """One recorded step on this process's clock (perf_counter seconds)."""
    step: int
    start: float
    actions_done: float     # every action's gradients ready: the optimizer step starts
    end: float
    events: list
    transfers: list


@dataclass
class TrainOutcome:
    config: RunConfig
    pipeline: Pipeline
    states: list                            # this process's stages (None for the others')
    steps: list[StepLog] = field(default_factory=list)
    measured: MeasuredCosts | None = None
    simulated: Timeline | None = None
    timeline: Timeline | None = None
    dispatch: dict = field(default_factory=dict)          # every process's host time per action kind
    stage_facts: list[dict] = field(default_factory=list)  # per stage, from the process that runs it
    swap_counters: dict = field(default_factory=dict)
    start_step: int = 0
    before_resume: list = field(default_factory=list)   # the metrics log's steps up to start_step (resumed)
    update_seconds: float | None = None   # optimizer step of all stages, timed in the charted step
    chart_step: int | None = None         # the step the timeline shows (obscura_jax.observe.step_time)
    chart_seconds: float | None = None    # its wall time: the run's measured iteration time
    transfers: list = field(default_factory=list)   # its stage-to-stage copies (events.MeasuredTransfer)
    memory: RunMemory | None = None                  # the memory check's estimates (obscura_jax.run.memory_check)
    device_peaks: dict = field(default_factory=dict)  # every process's devices: memory_stats peak bytes
    host_peak: list = field(default_factory=list)   # per stage: residual bytes in host memory at once (ledger)

    def stage_params(self) -> dict:
        """This process's stages' params (unit name -> tree), gathered to host: the
        whole model in a single process (obscura_jax.processes.distributed.gather_params
        collects them from several)."""
        out = {}
        for st in self.states:
            if st is not None:
                out.update(jax.tree.map(local_value, st.params))
        return out


def _mesh_peak(mesh):
    """The highest peak over a stage mesh's devices (None where not reported)."""
    peaks = [device_peak(d) for d in mesh.devices if d.process_index == jax.process_index()]
    return None if any(p is None for p in peaks) else max(peaks)


def _local_devices(pipe) -> dict:
    """This process's devices of the run, by name."""
    return {device_name(d): d for s in range(pipe.schedule.num_stages) for d in pipe.placement.mesh(s).devices
            if d.process_index == jax.process_index()}


def train(run: RunConfig, placement_fn, *, progress: bool = False, log=print,
          group: ProcessGroup = SINGLE, xla_profile=None) -> TrainOutcome:
    """placement_fn(n) -> Placement of n stages, one per device (devices are chosen
    once the schedule is known: obscura_jax.runtime.placement.place_schedule);
    `group`: the run's processes as this one sees them (default: just this one);
    `xla_profile`: a directory: the timed steps run inside `jax.profiler.trace`
    (several processes: one sub-directory `process-N` each)."""
    interrupt.raise_if_requested()
    outcome, data, ckpt, identity = _prepare(run, placement_fn, group, log)
    pipe = outcome.pipeline
    before_peaks = {s: _mesh_peak(pipe.placement.mesh(s)) for s in pipe.local_stages}
    metrics = MetricsLog(run.checkpoint_dir) if ckpt is not None and group.is_leader else None
    try:
        if metrics is not None:
            outcome.before_resume = metrics.start(outcome.start_step)
        interrupt.raise_if_requested()
        if run.measure_costs:
            with naming("the cost measurement"):
                _measure(outcome, group)
            outcome.memory.verify(outcome.pipeline)     # again in the issue order the costs gave
        with naming("a step's programs"):
            recorded, peak_live = _run_steps(outcome, data, ckpt, identity, group, progress, metrics,
                                             xla_profile)
    except DeviceOutOfMemory as e:    # its device's estimate beside its limit
        raise outcome.memory.explain(e) from None
    finally:
        if metrics is not None:
            metrics.close()
        if ckpt is not None:
            ckpt.close()
    _gather(outcome, group, recorded, peak_live, before_peaks)
    return outcome


def _prepare(run: RunConfig, placement_fn, group: ProcessGroup, log):
    """Schedule, placement, checkpoint, pipeline and (initial or restored) state."""
    cfg = run.model_config()
    run.check_layout(cfg)
    schedule, partition = run.resolve(cfg)
    placement: Placement = place_schedule(placement_fn, schedule, *run.layout,   # its note is in the report
                                          data_across_processes=run.data_across_processes)
    if placement.spans_processes and run.checkpoint_dir:
        raise RunError("--checkpoint-dir: checkpoints of stage meshes whose data axis spans processes are not "
                       "supported (give each process whole stage meshes)")
    shape = BatchShape(schedule.num_microbatches, run.micro_batch_size, run.seq_len)
    data = open_data(run.data, model_vocab=cfg.vocab_size, seed=run.seed, dtype=run.data_dtype)
    optimizer = make_optimizer(run.optimizer, run.learning_rate, run.weight_decay)
    order = plan_issue_order(run, schedule) or schedules.issue_order(schedule)
    memory = RunMemory(run, cfg, schedule, partition, placement, group, optimizer, order)
    memory.verify()                     # before compiling: traced figures, within seconds
    identity = identity_of(run, partition, schedule, group)
    ckpt = open_checkpointer(run.checkpoint_dir, run.resume, group) if run.checkpoint_dir else None
    try:
        start = ckpt.resumable_step(identity) if ckpt is not None else None
        if run.resume and start is None and group.is_leader:
            warn(f"--resume: {run.checkpoint_dir} holds no checkpoint, nothing to resume; starting afresh "
                 "at step 1")
        if start is not None and start >= run.steps:
            raise RunError(f"checkpoint in {run.checkpoint_dir} is at step {start}, "
                           f"nothing to do for --steps {run.steps}")
        with naming("compiling the stage programs"):
            pipe = build_pipeline(cfg, schedule, partition, run.base_policy(cfg), placement, shape, optimizer, order,
                                  swap_mechanism=run.swap_mechanism, swap_enabled=run.swap_enabled, group=group,
                                  weight_grad=run.weight_grad_options)
            memory.verify(pipe)         # XLA's own sizes, before any array is placed
        # before any transfer between processes
        check_order(pipe, group, "schedule and transfer order", {"identity": identity, "run": agreed(run)})
        with naming("placing the stages' parameters"):
            pipe.executor.transport.warm_up()
            states = pipe.init_state(run.seed)
        outcome = TrainOutcome(run, pipe, states, memory=memory)
        if start is not None:
            start, trees = restore_with_fallback(ckpt, _trees(states), start, group)
        if start is not None:
            for s, tree in enumerate(trees):
                if tree is not None:
                    states[s].params, states[s].opt_state = tree
            outcome.start_step = start
            if group.is_leader:
                log(f"resumed from {ckpt.directory} at step {start}")
    except BaseException as e:
        if ckpt is not None:
            ckpt.close()
        if isinstance(e, DeviceOutOfMemory):
            raise memory.explain(e) from None
        raise
    group.progress("set-up")
    return outcome, data, ckpt, identity


def _trees(states: list) -> list:
    return [None if st is None else (st.params, st.opt_state) for st in states]


def _measure(outcome: TrainOutcome, group: ProcessGroup) -> None:
    """Each process times its stages; every process combines all parts the same way
    and derives the issue order from those shared costs. Processes on CPU devices
    share the host's cores, so they time their stages one after the other."""
    run, pipe = outcome.config, outcome.pipeline
    device = next(d for d in pipe.placement.mesh(pipe.local_stages[0]).devices if group.owns(d))
    spans = pipe.placement.spans_processes    # collectives across processes: all time at once, in lockstep
    timing = CostTiming.for_device(device, run.cost_reps)
    timing = timing.in_lockstep() if spans else timing
    turns = range(group.size) if group.size > 1 and device.platform == "cpu" and not spans else [group.rank]
    for turn in turns:
        if turn == group.rank:
            with naming("the cost measurement", device_name(device)):   # the device it times on
                stages = measure_stages(pipe, outcome.states, run.base_policy(pipe.cfg), timing)
        if len(turns) > 1:
            group.barrier(f"costs measured by process {turn}")
    part = {"stages": stages, "boundaries": measure_boundaries(pipe, timing)}
    outcome.measured = combine(group.gather("costs", part), pipe.schedule.num_stages)
    outcome.simulated = schedules.simulate(pipe.schedule, outcome.measured.costs)
    # A plan's own order when it records one (its memory was judged in it), else the
    # order the measured costs give.
    planned = plan_issue_order(run, pipe.schedule)
    pipe.executor.order = planned or schedules.issue_order(pipe.schedule, outcome.measured.costs)
    check_order(pipe, group, "transfer order from the measured costs", {})
    group.progress("costs")


def _run_steps(outcome: TrainOutcome, data, ckpt, identity, group: ProcessGroup, progress: bool,
               metrics: MetricsLog | None = None, xla_profile=None) -> tuple[list, list]:
    """The step loop; returns this process's recorded steps (every timed one,
    obscura_jax.observe.step_time) and the peak live bytes per stage.
    Long: one step's issue, wait, shared loss, bookkeeping and checkpoint together."""
    run, pipe, states = outcome.config, outcome.pipeline, outcome.states
    ex = pipe.executor
    local = [states[s] for s in pipe.local_stages]
    bar = None
    if progress and group.is_leader:
        bar = tqdm(total=run.steps, initial=outcome.start_step, desc=pipe.schedule.name, unit="step",
                   leave=True, dynamic_ncols=True, disable=None)  # None: off when not a TTY
    peak_live = [0] * pipe.schedule.num_stages
    recorded: list[RecordedStep] = []
    recorder = None
    first_timed = first_timed_step(outcome.start_step, run.steps, run.warmup_steps)
    profiling = None
    interrupt.defer_sigterm(True)   # SIGTERM: stop at a step's end (checkpoints/stop.py)
    try:
        for step in range(outcome.start_step, run.steps):
            interrupt.raise_if_requested()
            if xla_profile is not None and step == first_timed:
                profiling = xla_trace(xla_profile, group)
            tokens, targets = data.microbatches(step, pipe.shape)
            record = run.record_timeline and step >= first_timed
            recorder = EventRecorder(ex.devices).__enter__() if record else None
            ex.transport.recorder = recorder
            t0 = time.perf_counter()
            result = ex.run_actions(states, tokens, targets, recorder=recorder, track_memory=True)
            if recorder is not None:  # a recorded step also times the optimizer step alone
                jax.block_until_ready([st.grads for st in local])
                t_actions = time.perf_counter()
            ex.apply_updates(states)
            # Block on our own state: Python runs ahead of the devices, and a process
            # must not start step k+1 (nor report progress) before its step k is done.
            jax.block_until_ready([st.params for st in local])
            mine = None if result.losses is None else [float(v) for v in local_value(result.losses)]
            seconds = time.perf_counter() - t0
            if recorder is not None:
                ex.transport.recorder = None
                events = recorder.close()
                recorded.append(RecordedStep(step + 1, t0, t_actions, t0 + seconds, events, recorder.transfers()))
                recorder = None
            losses, sigterm = share_step_end(group, mine)
            loss = float(np.mean(losses))
            if not np.isfinite(loss):
                raise RunError(f"loss became {loss} at step {step + 1}")
            outcome.steps.append(StepLog(step + 1, loss, seconds, record))
            if metrics is not None:
                metrics.append(step + 1, loss, seconds)
            for k, v in result.dispatch_seconds.items():
                outcome.dispatch.setdefault(k, []).extend(v)
            peak_live = [max(a, b) for a, b in zip(peak_live, result.ledger.peak)]
            host_before = outcome.host_peak or [0] * len(peak_live)
            outcome.host_peak = [max(a, b) for a, b in zip(host_before, result.ledger.host_peak)]
            if bar is not None:
                bar.update(1)
                bar.set_postfix(loss=f"{loss:.4f}", tok_s=f"{pipe.shape.tokens_per_step / seconds:,.0f}")
            done = step + 1
            if ckpt is not None and ((run.checkpoint_every and done % run.checkpoint_every == 0)
                                     or done == run.steps or sigterm):
                group.progress(f"saving the checkpoint of step {done}")
                ckpt.save(done, _trees(states), identity)
                interrupt.note_checkpoint(ckpt.directory, done)
            group.progress(f"step {done}", seconds)
            if sigterm:
                stop_after(done, sigterm, group)
    finally:
        ex.transport.recorder = None
        if recorder is not None:  # a step failed while recording: stop the waiter threads
            recorder.close()
        if profiling is not None:
            profiling.__exit__(None, None, None)
        if bar is not None:
            bar.close()
        interrupt.defer_sigterm(False)   # last: a SIGTERM that came after the last step is raised now
    return recorded, peak_live


def _gather(outcome: TrainOutcome, group: ProcessGroup, recorded: list, peak_live: list,
            before_peaks: dict) -> None:
    """Per-stage facts and the charted step's events of every process, on every
    process. The charted step is the median timed step by process 0's clock
    (obscura_jax.observe.step_time), the same on every process."""
    pipe, run = outcome.pipeline, outcome.config
    leader_steps = group.gather("timed steps", [[s.step, s.seconds] for s in timed(outcome.steps, run.warmup_steps)
                                                if s.recorded])[0]
    chosen = median_step(leader_steps)
    chart = next((r for r in recorded if chosen is not None and r.step == chosen[0]), None)
    mine = []
    # stages spanning processes: every process ran them all; the leader's account stands
    reporting = pipe.local_stages if not pipe.placement.spans_processes or group.is_leader else []
    if not reporting:
        events = []
    for s in reporting:
        st, prog = outcome.states[s], pipe.programs[s]
        after, before = _mesh_peak(pipe.placement.mesh(s)), before_peaks[s]
        sizes = prog.residual_device_leaf_bytes
        swapped = (sum(sizes[i] for i in choose_leaves(sizes, pipe.schedule.stages[s].swap_fraction))
                   if pipe.executor.swap_enabled else 0)
        mine.append({"stage": s, "process": group.rank, "row": pipe.stage_row(s),
                     "weight_bytes": device_bytes((st.params, st.grads, st.opt_state)),
                     "ledger_peak": peak_live[s], "temp_bytes": prog.temp_bytes,
                     "ledger_host_peak": outcome.host_peak[s] if outcome.host_peak else 0,
                     "device_peak": None if after is None or (before is not None and after <= before) else after,
                     "residual_bytes": prog.residual_bytes, "swapped_bytes_per_block": swapped})
    off = group.clock_offset
    step_clock = None if chart is None else [chart.start + off, chart.actions_done + off, chart.end + off]
    peaks = {name: device_peak(d) for name, d in _local_devices(pipe).items()}
    facts = group.gather("stage_facts", {"stages": mine, "dispatch": outcome.dispatch, "device_peaks": peaks,
                                         "swap": vars(pipe.executor.swap.counters).copy(),
                                         "step_clock": step_clock,
                                         "events": events_to_json(chart.events, off) if chart else [],
                                         "transfers": transfers_to_json(chart.transfers, off) if chart else []})
    outcome.stage_facts = sorted((row for f in facts for row in f["stages"]), key=lambda r: r["stage"])
    outcome.device_peaks = {k: v for f in facts for k, v in f["device_peaks"].items()}
    outcome.dispatch = {}
    outcome.swap_counters = {}
    for f in facts:
        for k, v in f["dispatch"].items():
            outcome.dispatch.setdefault(k, []).extend(v)
        for k, v in f["swap"].items():
            outcome.swap_counters[k] = outcome.swap_counters.get(k, 0) + v
    clocks = [f["step_clock"] for f in facts if f["step_clock"] is not None]
    if not clocks or chosen is None:
        return
    start = facts[0]["step_clock"][0] if facts[0]["step_clock"] else min(c[0] for c in clocks)
    outcome.chart_step, outcome.chart_seconds = int(chosen[0]), float(chosen[1])
    # the optimizer step: from the last process's gradients ready (every action ended by then) to the end
    grads_ready = max(c[1] for c in clocks)
    outcome.update_seconds = max(0.0, outcome.chart_seconds - (grads_ready - start))
    if merged := merge_events([f["events"] for f in facts]):
        ops = infer_ops(merged, pipe.schedule.num_stages, pipe.executor.order, start, grads_ready)
        outcome.timeline = measured_timeline(pipe, ops, outcome.stage_facts)
        outcome.transfers = infer_transfers(merge_transfers([f["transfers"] for f in facts]), ops, start, grads_ready)
