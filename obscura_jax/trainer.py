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

import dataclasses
import time
from dataclasses import dataclass, field

import jax
import numpy as np
from tqdm import tqdm

import schedules
from obscura_jax.stage_mesh import device_bytes
from obscura_jax.run_checkpoint import open_checkpointer
from obscura_jax.checkpoint_dir import MetricsLog, warn
from obscura_jax.data import BatchShape, open_data
from obscura_jax.engine import Pipeline, build_pipeline
from obscura_jax.errors import RunError
from obscura_jax.events import EventRecorder, events_to_json, infer_ops, merge_events
from obscura_jax import interrupt
from obscura_jax.executor import make_optimizer
from obscura_jax.measure import CostTiming, MeasuredCosts, combine, measure_boundaries, measure_stages
from obscura_jax.messages import order_digest, transfer_plan
from obscura_jax.placement import Placement, place_schedule
from obscura_jax.plan_run import plan_issue_order
from obscura_jax.process_group import SINGLE, ProcessGroup
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
    states: list                            # this process's stages (None for the others')
    steps: list[StepLog] = field(default_factory=list)
    measured: MeasuredCosts | None = None
    simulated: Timeline | None = None
    timeline: Timeline | None = None
    dispatch: dict = field(default_factory=dict)          # every process's host time per action kind
    stage_facts: list[dict] = field(default_factory=list)  # per stage, from the process that runs it
    swap_counters: dict = field(default_factory=dict)
    start_step: int = 0
    update_seconds: float | None = None   # optimizer step of all stages, timed in the recorded step

    def stage_params(self) -> dict:
        """This process's stages' params (unit name -> tree), gathered to host: the
        whole model in a single process (obscura_jax.distributed.gather_params
        collects them from several)."""
        out = {}
        for st in self.states:
            if st is not None:
                out.update(jax.device_get(st.params))
        return out


def identity_of(run: RunConfig, partition, schedule, group: ProcessGroup = SINGLE) -> dict:
    """What a checkpoint must share with a run resuming it (the schedule may differ)."""
    cfg = run.model_config()
    return {"model": run.model, "units": [list(r) for r in partition], "stages": len(partition),
            "processes": group.size, "seed": run.seed, "data": run.data, "data_dtype": run.data_dtype,
            "micro_batch_size": run.micro_batch_size, "seq_len": run.seq_len,
            "microbatches": schedule.num_microbatches, "compute_dtype": cfg.compute_dtype,
            "param_dtype": cfg.param_dtype, "optimizer": [run.optimizer, run.learning_rate, run.weight_decay],
            "layout": {"data": run.data_parallel, "tensor": run.tensor_parallel}}


def _device_peak(device):
    stats = device.memory_stats()
    if not stats or "peak_bytes_in_use" not in stats:
        return None
    return int(stats["peak_bytes_in_use"])


def _mesh_peak(mesh):
    """The highest peak over a stage mesh's devices (None where not reported)."""
    peaks = [_device_peak(d) for d in mesh.devices]
    return None if any(p is None for p in peaks) else max(peaks)


def train(run: RunConfig, placement_fn, *, progress: bool = False, log=print,
          group: ProcessGroup = SINGLE) -> TrainOutcome:
    """placement_fn(n) -> Placement of n stages, one per device (devices are chosen
    once the schedule is known: obscura_jax.placement.place_schedule);
    `group`: the run's processes as this one sees them (default: just this one)."""
    interrupt.raise_if_requested()
    outcome, data, ckpt, identity = _prepare(run, placement_fn, group, log)
    pipe = outcome.pipeline
    before_peaks = {s: _mesh_peak(pipe.placement.mesh(s)) for s in pipe.local_stages}
    metrics = MetricsLog(run.checkpoint_dir) if ckpt is not None and group.is_leader else None
    try:
        if metrics is not None:
            metrics.start(outcome.start_step)
        interrupt.raise_if_requested()
        if run.measure_costs:
            _measure(outcome, group)
        events, peak_live = _run_steps(outcome, data, ckpt, identity, group, progress, metrics)
    finally:
        if metrics is not None:
            metrics.close()
        if ckpt is not None:
            ckpt.close()
    _gather(outcome, group, events, peak_live, before_peaks)
    return outcome


def _prepare(run: RunConfig, placement_fn, group: ProcessGroup, log):
    """Schedule, placement, checkpoint, pipeline and (initial or restored) state."""
    cfg = run.model_config()
    run.check_layout(cfg)
    schedule, partition = run.resolve(cfg)
    placement: Placement = place_schedule(placement_fn, schedule, *run.layout)   # its note is in the report
    shape = BatchShape(schedule.num_microbatches, run.micro_batch_size, run.seq_len)
    data = open_data(run.data, model_vocab=cfg.vocab_size, seed=run.seed, dtype=run.data_dtype)
    optimizer = make_optimizer(run.optimizer, run.learning_rate, run.weight_decay)
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
        pipe = build_pipeline(cfg, schedule, partition, run.policy, placement, shape, optimizer,
                              plan_issue_order(run, schedule) or schedules.issue_order(schedule),
                              swap_mechanism=run.swap_mechanism,
                              swap_enabled=run.swap_enabled, group=group)
        # before any transfer between processes
        check_order(pipe, group, "schedule and transfer order", {"identity": identity, "run": _agreed(run)})
        pipe.executor.transport.warm_up()
        states = pipe.init_state(run.seed)
        outcome = TrainOutcome(run, pipe, states)
        if start is not None:
            start, trees = restore_with_fallback(ckpt, _trees(states), start, group)
        if start is not None:
            for s, tree in enumerate(trees):
                if tree is not None:
                    states[s].params, states[s].opt_state = tree
            outcome.start_step = start
            if group.is_leader:
                log(f"resumed from {ckpt.directory} at step {start}")
    except BaseException:
        if ckpt is not None:
            ckpt.close()
        raise
    group.progress("set-up")
    return outcome, data, ckpt, identity


def restore_with_fallback(ckpt, like: list, step: int, group: ProcessGroup) -> tuple[int | None, list | None]:
    """(step, trees) of the newest checkpoint from `step` down that restores on every
    process; a damaged one is skipped with one warning line (None, None: none left)."""
    from obscura_jax.checkpoint import skip_damaged  # lazy: only resumed runs
    from obscura_jax.errors import error_line

    candidates = [step] + ckpt.steps_before(step)
    for i, cand in enumerate(candidates):
        try:
            trees, failure = ckpt.restore(like, cand), None
        except RunError:
            raise
        except Exception as e:  # noqa: BLE001  a damaged step: every process falls back together
            trees, failure = None, e
        failed = [f for f in group.gather("restore", None if failure is None else
                                          f"{type(failure).__name__}: {error_line(failure)}") if f]
        if not failed:
            return cand, trees
        if group.is_leader:
            skip_damaged(ckpt, cand, candidates[i + 1] if i + 1 < len(candidates) else None,
                         failure or RuntimeError(failed[0]))
    return None, None


def _trees(states: list) -> list:
    return [None if st is None else (st.params, st.opt_state) for st in states]


def _agreed(run: RunConfig) -> dict:
    """The run's settings every process must share (paths may differ between hosts)."""
    fields = dataclasses.asdict(run)
    fields.pop("checkpoint_dir")
    return fields


def check_order(pipe: Pipeline, group: ProcessGroup, what: str, extra: dict) -> None:
    """Every process must hold the same schedule, issue order and transfer plan (a
    cross-process transfer issued out of order swaps data or hangs) and run the same
    settings (`extra`): compare their hash; a difference is a one-line error on every
    process."""
    ex = pipe.executor
    process_of = [d.process_index for d in pipe.placement.devices]
    plan = getattr(ex.transport, "plan", None)
    if plan is None:
        plan = transfer_plan(ex.order, ex.routes, process_of)
    digest, summary = order_digest(pipe.schedule, ex.order, plan, process_of, pipe.boundary_specs,
                                   {**extra, "jax": jax.__version__})
    group.agree(what, digest, summary)


def _measure(outcome: TrainOutcome, group: ProcessGroup) -> None:
    """Each process times its stages; every process combines all parts the same way
    and derives the issue order from those shared costs. Processes on CPU devices
    share the host's cores, so they time their stages one after the other."""
    run, pipe = outcome.config, outcome.pipeline
    device = pipe.placement.devices[pipe.local_stages[0]]
    timing = CostTiming.for_device(device, run.cost_reps)
    turns = range(group.size) if group.size > 1 and device.platform == "cpu" else [group.rank]
    for turn in turns:
        if turn == group.rank:
            stages = measure_stages(pipe, outcome.states, run.policy, timing)
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
               metrics: MetricsLog | None = None) -> list:
    """The step loop; returns the recorded step's events (this process's) and the
    peak live bytes per stage.
    Long: one step's issue, wait, shared loss, bookkeeping and checkpoint together."""
    run, pipe, states = outcome.config, outcome.pipeline, outcome.states
    ex = pipe.executor
    local = [states[s] for s in pipe.local_stages]
    bar = None
    if progress and group.is_leader:
        bar = tqdm(total=run.steps, initial=outcome.start_step, desc=pipe.schedule.name, unit="step",
                   leave=True, dynamic_ncols=True, disable=None)  # None: off when not a TTY
    peak_live = [0] * pipe.schedule.num_stages
    events: list = []
    recorder = None
    try:
        for step in range(outcome.start_step, run.steps):
            interrupt.raise_if_requested()
            tokens, targets = data.microbatches(step, pipe.shape)
            record = run.record_timeline and step == run.steps - 1
            recorder = EventRecorder(ex.devices).__enter__() if record else None
            t0 = time.perf_counter()
            result = ex.run_actions(states, tokens, targets, recorder=recorder, track_memory=True)
            if recorder is not None:  # the recorded step also times the optimizer step alone
                jax.block_until_ready([st.grads for st in local])
                t_actions = time.perf_counter()
            ex.apply_updates(states)
            # Block on our own state: Python runs ahead of the devices, and a process
            # must not start step k+1 (nor report progress) before its step k is done.
            jax.block_until_ready([st.params for st in local])
            mine = None if result.losses is None else [float(v) for v in np.asarray(result.losses)]
            seconds = time.perf_counter() - t0
            if recorder is not None:
                outcome.update_seconds = seconds - (t_actions - t0)
                events, recorder = recorder.close(), None
            losses = next(v for v in group.gather("loss", mine) if v is not None)
            loss = float(np.mean(losses))
            if not np.isfinite(loss):
                raise RunError(f"loss became {loss} at step {step + 1}")
            outcome.steps.append(StepLog(step + 1, loss, seconds, record))
            if metrics is not None:
                metrics.append(step + 1, loss, seconds)
            for k, v in result.dispatch_seconds.items():
                outcome.dispatch.setdefault(k, []).extend(v)
            peak_live = [max(a, b) for a, b in zip(peak_live, result.ledger.peak)]
            if bar is not None:
                bar.update(1)
                bar.set_postfix(loss=f"{loss:.4f}", tok_s=f"{pipe.shape.tokens_per_step / seconds:,.0f}")
            done = step + 1
            if ckpt is not None and ((run.checkpoint_every and done % run.checkpoint_every == 0)
                                     or done == run.steps):
                group.progress(f"saving the checkpoint of step {done}")
                ckpt.save(done, _trees(states), identity)
            group.progress(f"step {done}", seconds)
    finally:
        if recorder is not None:  # a step failed while recording: stop the waiter threads
            recorder.close()
        if bar is not None:
            bar.close()
    return events, peak_live


def _gather(outcome: TrainOutcome, group: ProcessGroup, events: list, peak_live: list,
            before_peaks: dict) -> None:
    """Per-stage facts and the recorded events of every process, on every process."""
    pipe = outcome.pipeline
    mine = []
    for s in pipe.local_stages:
        st, prog = outcome.states[s], pipe.programs[s]
        after, before = _mesh_peak(pipe.placement.mesh(s)), before_peaks[s]
        sizes = prog.residual_leaf_bytes
        swapped = (sum(sizes[i] for i in choose_leaves(sizes, pipe.schedule.stages[s].swap_fraction))
                   if pipe.executor.swap_enabled else 0)
        mine.append({"stage": s, "process": group.rank, "row": pipe.stage_row(s),
                     "weight_bytes": device_bytes((st.params, st.grads, st.opt_state)),
                     "ledger_peak": peak_live[s], "temp_bytes": prog.temp_bytes,
                     "device_peak": None if after is None or (before is not None and after <= before) else after,
                     "residual_bytes": prog.residual_bytes, "swapped_bytes_per_block": swapped})
    facts = group.gather("stage_facts", {"stages": mine, "dispatch": outcome.dispatch,
                                         "swap": vars(pipe.executor.swap.counters).copy(),
                                         "update_seconds": outcome.update_seconds,
                                         "events": events_to_json(events, group.clock_offset)})
    outcome.stage_facts = sorted((row for f in facts for row in f["stages"]), key=lambda r: r["stage"])
    outcome.dispatch = {}
    outcome.swap_counters = {}
    for f in facts:
        for k, v in f["dispatch"].items():
            outcome.dispatch.setdefault(k, []).extend(v)
        for k, v in f["swap"].items():
            outcome.swap_counters[k] = outcome.swap_counters.get(k, 0) + v
    updates = [f["update_seconds"] for f in facts if f["update_seconds"] is not None]
    outcome.update_seconds = max(updates) if updates else None
    merged = merge_events([f["events"] for f in facts])
    if merged:
        outcome.timeline = measured_timeline(pipe, merged, outcome.stage_facts)


def measured_timeline(pipe: Pipeline, events, stage_facts: list[dict]) -> Timeline:
    """Events of one iteration (every process's, on one clock) -> a Timeline with the
    simulator's statistics."""
    ops = infer_ops(events, pipe.schedule.num_stages, pipe.executor.order)
    records = []
    for op in ops:
        a = op.action
        nbytes = None  # F: the stage's kept bytes; SO/SI: what the leaf choice really moved
        if a.kind in (Kind.SO, Kind.SI):
            nbytes = float(stage_facts[a.stage]["swapped_bytes_per_block"])
        records.append(OpRecord.of(a, op.start, op.end, 0.0, nbytes))
    kept = [float(f["residual_bytes"]) for f in stage_facts]
    return Timeline.from_ops(pipe.schedule.num_stages, records, kept, name=f"{pipe.schedule.name} (measured)",
                             stage_to_device=pipe.schedule.stage_to_device)
