"""The Python front door: train a RunConfig, or build a pipeline from a model and a
schedule, without the command line.

    import obscura_jax
    obscura_jax.cpu_devices(4)              # before any JAX computation
    result = obscura_jax.train(obscura_jax.RunConfig(schedule="obscura", adjusted=1, steps=2))
    result.losses, result.summary["iteration_time"], result.timeline

`train` runs what `obscura train` runs (obscura_jax.run.trainer) and returns a
TrainResult; `make_pipeline` derives what the engine needs (issue order, partition,
batch shape) from the schedule and the model and returns the engine's Pipeline.
`summarize` is the one JSON-ready summary of a run, for the CLI and for scripts.
`measure_stage` times one stage program under a policy (a jax.checkpoint policy
experiment on your own stage); `profile_model` measures a planner profile.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import jax
import jax.numpy as jnp

import models
import schedules
from obscura_jax.observe import summary
from obscura_jax.observe import trace as trace_run
from obscura_jax.run import trainer
from obscura_jax.run.checks import check_against_reference
from obscura_jax.run.data import BatchShape
from obscura_jax.devices import parse_devices
from obscura_jax.runtime.pipeline import Pipeline, build_pipeline, build_program
from obscura_jax.runtime.executor import make_optimizer
from obscura_jax.observe.measure import CostTiming, StageTiming, time_stage, time_unit_program
from obscura_jax.runtime.placement import Placement, place_stages
from obscura_jax.observe.report import train_report
from obscura_jax.run.run_config import RunConfig
from obscura_jax.runtime.weight_grad import WeightGrad
from obscura_jax.observe.summary import measured_with_recompute
from obscura_jax.profiling import profiler
from schedules.timeline import Timeline


@dataclass(frozen=True)
class TrainResult:
    """One run: its summary (what `obscura train --json` writes) and the run itself."""
    summary: dict
    outcome: trainer.TrainOutcome = field(repr=False)

    @property
    def losses(self) -> list[float]:
        """Mean loss per step, in order."""
        return list(self.summary["losses"])

    @property
    def timeline(self) -> Timeline | None:
        """The measured timeline of the recorded (last) step, in seconds."""
        return self.outcome.timeline

    @property
    def simulated(self) -> Timeline | None:
        """The simulator's timeline from the costs measured in this run, in seconds."""
        return self.outcome.simulated

    def gantt(self, path_png, title: str | None = None) -> list:
        """Draw the measured timeline (the PNG, and an SVG beside it; recompute hatched
        at its measured share of each backward); returns the files written."""
        from schedules.formats.gantt import draw_gantt  # lazy: matplotlib only when drawing
        if self.timeline is None:
            return []
        return draw_gantt(measured_with_recompute(self.outcome), path_png, time_unit="s",
                          title=title or f"{self.summary['schedule']} measured ({self.summary['model']})")

    def trace(self) -> dict | None:
        """The measured step as trace-event JSON (obscura_jax.observe.trace): a track per
        stage, swap and transfer tracks, recompute inside each backward; it spans the
        measured iteration time. None when nothing was recorded."""
        return trace_run.measured_trace(self.outcome)

    def write_trace(self, path) -> list:
        """Write `trace()` to `path` (ui.perfetto.dev); returns the files written."""
        return [path] if trace_run.write_measured_trace(self.outcome, path) else []

    def params(self) -> dict:
        """The whole model's trained params (unit name -> tree), on the host."""
        return self.outcome.stage_params()

    def report(self) -> str:
        """The table `obscura train` prints."""
        return train_report(self.summary)

    def check(self) -> dict:
        """Train the unpipelined model on one device on the same data and compare
        losses and params (what `obscura train --check` does); ["equal"] says if
        they agree at the tolerances it reports."""
        return check_against_reference(self.outcome)


def placement_for(devices=None):
    """devices: None (GPUs if any, else one emulated CPU device per stage), "cpu:N",
    "gpu", or a sequence of jax devices (stage s on devices[s % len(devices)]) ->
    a function num_stages -> Placement. Call before JAX starts to get CPU devices."""
    if devices is None or isinstance(devices, str):
        def place(p: int) -> Placement:
            platform, count = parse_devices(devices, p)
            return place_stages(p, platform, count)
        return place
    pool = tuple(devices)

    def place_on(p: int) -> Placement:
        chosen = tuple(pool[s % len(pool)] for s in range(p))
        shared = len({d.id for d in chosen}) < p
        note = f"{p} stages on {len({d.id for d in chosen})} devices (round-robin)" if shared else ""
        return Placement(chosen, chosen[0].platform, note)
    return place_on


def summarize(outcome: trainer.TrainOutcome) -> dict:
    """The run's JSON-ready summary (obscura_jax.observe.summary.summarize) with what the run config
    adds: each stage's `adjusted` in the plan's sense (obscura_jax.run.run_config.
    RunConfig.adjusted_stages) and whether it `recomputes`, and a plan's labels."""
    res = summary.summarize(outcome)
    run, pipe = outcome.config, outcome.pipeline
    adjusted = run.adjusted_stages(pipe.schedule)
    res["adjusted_stages"] = list(adjusted)
    for s, row in enumerate(res["stages"]):
        row["recomputes"] = bool(pipe.schedule.stages[s].recompute)
        row["adjusted"] = s in adjusted
    res.update(run.plan_labels())
    return res


def train(run: RunConfig, *, devices=None, progress: bool = False, log=print, xla_profile=None) -> TrainResult:
    """Run `run` (a RunConfig) on `devices` (see placement_for) and summarise it;
    `xla_profile`: a directory: the timed steps run inside `jax.profiler.trace`."""
    outcome = trainer.train(run, placement_for(devices), progress=progress, log=log, xla_profile=xla_profile)
    return TrainResult(summarize(outcome), outcome)


def measure_stage(model, unit_range, policy="none", *, micro_batch_size: int = 2, seq_len: int = 64,
                  reps: int = 5, seed: int = 0, device=None) -> StageTiming:
    """One stage program of `model` over the half-open `unit_range` under `policy`
    (a preset, op names, or a models.RecomputePolicy), compiled as the engine
    compiles it and timed standalone on `device` (default: the first JAX device):
    StageTiming(fwd, bwd seconds (median of `reps` steady-state samples), residual_bytes kept per
    micro-batch, temp_bytes of XLA scratch, and fwd_range / bwd_range: {"min", "median", "max"}
    of the samples, how much the timing spread)."""
    cfg = models.get_config(model) if isinstance(model, str) else model
    device = device or jax.devices()[0]
    unit_range = tuple(unit_range)
    shape = BatchShape(1, micro_batch_size, seq_len)
    prog = build_program(cfg, unit_range, policy, device, shape)
    params = jax.device_put(models.init_params(cfg, seed, unit_range), device)
    key = jax.random.key(seed)
    if prog.takes_tokens:
        x = jax.random.randint(key, (micro_batch_size, seq_len), 0, cfg.vocab_size, jnp.int32)
    else:
        x = jax.random.normal(key, (micro_batch_size, seq_len, cfg.hidden), jnp.dtype(cfg.compute_dtype))
    targets = (jax.random.randint(jax.random.fold_in(key, 1), (micro_batch_size, seq_len), 0, cfg.vocab_size,
                                  jnp.int32) if prog.returns_loss else None)
    put = lambda a: None if a is None else jax.device_put(a, device)  # noqa: E731
    return time_stage(prog, params, put(x), put(targets), CostTiming.for_device(device, reps))


def profile_model(model, seq_len: int, micro_batch: int = 1, *, reps: int = 5, ops=None, progress=None):
    """A planner profile (obscura-profile/1) of `model` measured on this machine's
    first JAX device, as `obscura profile` measures it: obscura_jax.profiling.profiler.ProfileRun
    (.profile, .notes, .seconds)."""
    cfg = models.get_config(model) if isinstance(model, str) else model
    return profiler.profile_model(cfg, seq_len, micro_batch, time_unit=time_unit_program, reps=reps, ops=ops,
                   progress=progress)


def make_pipeline(model, schedule, *, partition=None, policy="none", micro_batch_size: int = 2,
                  seq_len: int = 64, optimizer: str = "adamw", learning_rate: float = 1e-3,
                  weight_decay: float = 0.01, devices=None, swap_mechanism: str = "device_put",
                  swap_enabled: bool = True, weight_grad: str = "hold", head_weight_grad: str = "auto") -> Pipeline:
    """The engine's Pipeline for `model` (a registered name or a ModelConfig) and
    `schedule` (a Schedule, or a generator name run with its defaults on 4 stages
    and 8 micro-batches): the issue order comes from the schedule, the partition
    (default: the even split) and the batch shape (its micro-batch count) from the
    schedule and the model. `pipe.init_state(seed)` gives the stage states,
    `pipe.executor.run_actions(states, tokens, targets)` runs one iteration.
    `weight_grad` / `head_weight_grad`: a split backward's W (RunConfig's fields of
    the same names, `--weight-grad` / `--head-weight-grad`)."""
    cfg = models.get_config(model) if isinstance(model, str) else model
    if isinstance(schedule, str):
        schedule = schedules.generate(schedule, 4, 8)
    schedules.validate(schedule)
    if partition is None:
        partition = models.even_partition(cfg.num_units, schedule.num_stages)
    shape = BatchShape(schedule.num_microbatches, micro_batch_size, seq_len)
    placement = placement_for(devices)(schedule.num_stages)
    return build_pipeline(cfg, schedule, partition, policy, placement, shape,
                          make_optimizer(optimizer, learning_rate, weight_decay),
                          schedules.issue_order(schedule), swap_mechanism=swap_mechanism,
                          swap_enabled=swap_enabled, weight_grad=WeightGrad(weight_grad, head_weight_grad))
