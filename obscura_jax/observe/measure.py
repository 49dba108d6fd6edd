"""Costs measured on the devices of a run, for the simulator (StageCosts).

Each stage's forward and backward are timed standalone, in steady state, on random
data (`CostTiming`): the device is first kept busy with back-to-back runs
(`sustain_seconds`, the first program; `settle_seconds` before each later one), then
each sample is the mean of back-to-back runs, waiting only for the last, keeping
only the newest result (memory stays bounded), and the median of `samples` samples
is the cost. Why: on the H200 a short blocking burst ran at boost clock (1965-1980
MHz) while the pipeline ran at the 700 W power cap (~1500 MHz), so standalone costs
came out ~10% short of what the same program took in the pipeline; and constant
inputs (zero tokens, constant hidden states) draw less power than real data (a
matmul ran 13% faster on zeros). results/h200/power_cap holds that measurement.

`simulate(schedule, costs)` then predicts what the same run would take with
perfect overlap. Adjusted stages are also compiled with the run's base policy:
bwd = the base backward, recompute = the adjusted backward minus it (the simulator
adds it back on adjusted stages), act_bytes = the base residuals,
act_bytes_recompute = the adjusted residuals. Transfers (stage to stage, device to
host) are timed too; stage-to-stage through the run's Transport, so a boundary
between processes is timed as the cross-process transfer it is. The optimizer
step is timed in the run itself (trainer: the recorded iteration).

Several processes: each measures its own stages (`measure_local`, JSON-ready) and
`combine` builds one MeasuredCosts from every process's part, identically on all.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass, replace

import jax
import jax.numpy as jnp

import models
from obscura_jax.runtime.stage_mesh import device_bytes
from obscura_jax.run.data import BatchShape
from obscura_jax.runtime.pipeline import Pipeline, build_program
from obscura_jax.runtime.stage_program import Residuals, StageProgram
from obscura_jax.runtime.swap import HostSwap
from obscura_jax.runtime.weight_grad import WeightGrad
from obscura_jax.profiling.stopwatch import median_time, sample_times
from schedules.costs import StageCosts
from schedules.ir import Kind


@dataclass(frozen=True)
class CostTiming:
    """How programs are timed: `samples` samples of back-to-back runs lasting at
    least `sample_seconds` each (at most `max_calls` runs: every run in flight holds
    its outputs, a stage's residuals can be GBs), after `sustain_seconds` (first
    program) or `settle_seconds` (later ones) of untimed back-to-back load."""
    samples: int = 3
    sample_seconds: float | None = 0.01      # None: a sample is one call
    sustain_seconds: float = 0.0
    settle_seconds: float = 0.0
    max_calls: int = 50

    @classmethod
    def for_device(cls, device, samples: int) -> "CostTiming":
        """GPUs: 2 s of load first (to reach the power-capped steady clock), samples of
        ~0.1 s and at most 8 runs in flight. CPUs have no such clock swing: short
        samples, no sustained load."""
        if device.platform == "gpu":
            return cls(samples, sample_seconds=0.1, sustain_seconds=2.0, settle_seconds=0.3, max_calls=8)
        return cls(samples)

    def in_lockstep(self) -> "CostTiming":
        """The same calls on every process, whatever each one's clock says: a stage whose
        mesh spans processes (--data-across-processes) runs collectives across them,
        which pair call by call, so a count chosen from a measured time (a sample's
        length, seconds of load) would leave one process waiting for calls the other
        never makes. Each sample is one call, with no timed load before it."""
        return replace(self, sample_seconds=None, sustain_seconds=0.0, settle_seconds=0.0)

    def time(self, fn, first: bool) -> float:
        return statistics.median(self.spread(fn, first))

    def spread(self, fn, first: bool) -> list[float]:
        """Every sample's seconds per call (the cost is their median)."""
        return sample_times(fn, self.samples, min_sample_seconds=self.sample_seconds, max_calls=self.max_calls,
                            sustain_seconds=self.sustain_seconds if first else self.settle_seconds)


def _arrays(result) -> list:
    """Every array in a result, Residuals included (it is not a pytree)."""
    if isinstance(result, Residuals):
        return list(result.leaves)
    if isinstance(result, tuple):
        return [x for r in result for x in _arrays(r)]
    return [result]


def _wait(result):
    jax.block_until_ready(_arrays(result))
    return result


@dataclass(frozen=True)
class StageTiming:
    fwd: float
    bwd: float
    residual_bytes: int                # kept per micro-batch in device memory
    temp_bytes: int = 0         # XLA scratch of one program run
    input_grad: float | None = None    # I of the split backward (timed when asked)
    weight_grad: float | None = None   # W of the split backward
    weight_grad_bytes: int = 0         # what a W holds from its I (dy apart): inputs and output
                                       # cotangents of the weight matmuls
    weight_grad_rederive: float | None = None     # W when it re-derives its inputs (time_unit_program)
    weight_grad_rederive_bytes: int | None = None  # what that W holds (as weight_grad_bytes)
    weight_grad_made_bytes: int | None = None      # of weight_grad_bytes, what I computes (its outputs)
    weight_grad_beside_bytes: int | None = None    # of those, what I allocates beside the residuals
    fwd_range: dict | None = None      # {"min", "median", "max"} over the samples (fwd is the median)
    bwd_range: dict | None = None
    residual_host_bytes: int = 0       # kept per micro-batch in host memory (the policy's offload set);
                                       # residual_bytes is what stays in device memory


def _normal(spec, sharding, seed: int):
    """Random normal data of `spec` on a device (hidden states, cotangents)."""
    x = jax.random.normal(jax.random.key(seed), spec.shape, jnp.float32)
    return jax.device_put(x.astype(spec.dtype), sharding)


def times_fused_backward(split: bool, adjusted: bool) -> bool:
    """Whether measuring a stage times its fused backward B: a stage that runs B, and
    an adjusted split stage (its recompute is its B's time over the base policy's B).
    A split stage on the base policy is timed as it runs, its backward as I + W: B,
    which its schedule never runs, is not compiled only to be timed."""
    return not split or adjusted


def time_stage(prog: StageProgram, params, x, targets, timing: CostTiming, first: bool = True,
               split: bool = False, fused: bool = True) -> StageTiming:
    """Steady-state forward and backward seconds of one program on its device; with
    `split`, also its I and W programs, each timed alone as the engine runs them;
    without `fused` (split only), the backward is I + W and B is not run."""
    if not (fused or split):
        raise ValueError(f"{prog.name}: a stage that runs B is timed by it")
    fwd_args = (params, x, targets) if prog.returns_loss else (params, x)
    fwd_samples = timing.spread(lambda: _arrays(prog.forward(*fwd_args)), first)
    t_fwd = statistics.median(fwd_samples)
    res, dy = _split_inputs(prog, params, x, targets)
    grads = [prog.zero_grads(params)]
    ranges = {"fwd_range": _range(fwd_samples), "residual_host_bytes": prog.residual_host_bytes}
    if fused:
        def bwd():
            grads[0], _, done = prog.backward(params, res, dy, grads[0])   # grads donated: bounded memory
            return [done, grads[0]]
        bwd_samples = timing.spread(bwd, False)
        t_bwd, ranges["bwd_range"] = statistics.median(bwd_samples), _range(bwd_samples)
    if not split:
        return StageTiming(t_fwd, t_bwd, prog.residual_bytes, prog.temp_bytes, **ranges)
    t_i, t_w = time_split(prog, params, res, dy, grads, timing)
    return StageTiming(t_fwd, t_bwd if fused else t_i + t_w, prog.residual_bytes, prog.temp_bytes, t_i, t_w,
                       prog.weight_grad_held_bytes, weight_grad_made_bytes=prog.weight_grad_made_bytes,
                       weight_grad_beside_bytes=prog.weight_grad_beside_bytes, **ranges)


def _range(samples: list[float]) -> dict:
    """min / median / max of a program's timed samples (the median is its cost)."""
    return {"min": min(samples), "median": statistics.median(samples), "max": max(samples)}


def time_split(prog: StageProgram, params, res, dy, grads: list, timing: CostTiming) -> tuple[float, float]:
    """Steady-state seconds of the split backward's I and W programs on the same
    residuals (`grads`: a one-element list holding the donated accumulator). I runs
    as its twin that keeps the residuals (each call reads them again), then once as
    the engine runs it, which frees them."""
    prog.compile_split()

    def input_grad():
        grads[0], _, held, done = prog.input_grad(params, res, dy, grads[0], keep_residuals=True)
        return [done, grads[0]]
    t_i = timing.time(input_grad, False)
    grads[0], _, held, _ = _wait(prog.input_grad(params, res, dy, grads[0]))

    def weight():
        grads[0], done = prog.weight_grad(params, held, dy, grads[0])
        return [done, grads[0]]
    return t_i, timing.time(weight, False)


def time_unit_program(cfg, unit_range, policy, device, params, x, targets, reps: int,
                      split: bool = False) -> StageTiming:
    """The engine's program for `unit_range` under `policy`, timed in steady state:
    what obscura_jax.profiling.profiler.profile_model takes as its `time_unit`. With
    `split`, also its split backward's I and W, the W that re-derives its inputs
    (`--weight-grad rederive`, its own program) and what each W holds per micro-batch."""
    shape = BatchShape(1, x.shape[0], x.shape[1])
    prog = build_program(cfg, unit_range, policy, device, shape)
    timing = CostTiming.for_device(device, reps)
    t = time_stage(prog, params, x, targets, timing, split=split)
    if not split:
        return t
    again = build_program(cfg, unit_range, policy, device, shape, True, WeightGrad("rederive"))
    res, dy = _split_inputs(again, params, x, targets)
    _, t_rederive = time_split(again, params, res, dy, [again.zero_grads(params)], timing)
    # a unit's dy is, inside a stage, a cotangent its I computes: held when its W reads it
    return replace(t, weight_grad_bytes=unit_weight_grad_bytes(prog), weight_grad_rederive=t_rederive,
                   weight_grad_rederive_bytes=unit_weight_grad_bytes(again),
                   weight_grad_made_bytes=unit_weight_grad_bytes(prog, made=True),
                   weight_grad_beside_bytes=unit_weight_grad_bytes(prog, beside=True))


def _split_inputs(prog: StageProgram, params, x, targets):
    """(residuals of one forward, dy) to time a program's backward on."""
    dy = prog.loss_weight(1) if prog.returns_loss else _normal(prog.output_spec, prog.batch_sharding, seed=1)
    _, res = _wait(prog.forward(params, x, targets) if prog.returns_loss else prog.forward(params, x))
    return res, dy


def unit_weight_grad_bytes(prog: StageProgram, made: bool = False, beside: bool = False) -> int:
    """What a W holds from its I for the units of `prog` as part of a longer stage:
    its block plus the output cotangent when W reads it (the stage's own dy is
    counted apart, as the inbox's, so a stage summed from units counts one extra).
    `made`: only what I computes of it (the output cotangent included: inside a
    stage, the next unit's I computes it), not the residual leaves W reads in place.
    `beside`: of what I computes, what it allocates beside the residuals (the output
    cotangent counted whole: the next unit's I makes it)."""
    prog.compile_split()
    block = (prog.weight_grad_beside_bytes if beside else
             prog.weight_grad_made_bytes if made else prog.weight_grad_held_bytes)
    return block + (prog.dy_bytes if prog.weight_grad_reads_dy else 0)


def stage_inputs(pipe: Pipeline, s: int, seed: int = 0):
    """Random inputs of stage s on its device: tokens uniform over the vocabulary,
    hidden states standard normal, targets uniform."""
    prog = pipe.programs[s]
    b, t = pipe.shape.micro_batch_size, pipe.shape.seq_len
    vocab = pipe.cfg.vocab_size
    key = jax.random.key(1000 + seed + s)

    def tokens(k):
        return jax.device_put(jax.random.randint(k, (b, t), 0, vocab, jnp.int32), prog.batch_sharding)
    if prog.takes_tokens:
        x = tokens(key)
    else:
        x = _normal(pipe.boundary_specs[s - 1], prog.batch_sharding, seed=2000 + s)
    targets = tokens(jax.random.fold_in(key, 1)) if prog.returns_loss else None
    return x, targets


@dataclass(frozen=True)
class MeasuredCosts:
    costs: StageCosts
    base_bwd: tuple[float, ...]
    adjusted_bwd: tuple[float, ...]
    host_bandwidth_out: float
    host_bandwidth_in: float

    def to_json(self) -> dict:
        c = self.costs
        split = ({"input_grad": c.input_grad, "weight_grad": c.weight_grad, "weight_grad_held": c.weight_grad_held}
                 if c.input_grad else {})
        return {**split, "fwd": c.fwd, "bwd": c.bwd, "recompute": c.recompute, "act_bytes": c.act_bytes,
                "act_bytes_recompute": c.act_bytes_recompute, "weight_bytes": c.weight_bytes,
                "boundary_bytes": c.boundary_bytes, "p2p_bandwidth": c.p2p_bandwidth,
                "host_bandwidth": c.host_bandwidth, "host_bandwidth_out": self.host_bandwidth_out,
                "host_bandwidth_in": self.host_bandwidth_in}


def measure_local(pipe: Pipeline, states: list, base_policy, timing: CostTiming) -> dict:
    """This process's stages and the stage boundaries it times, JSON-ready:
    {"stages": {s: {...}}, "boundaries": {b: [bytes, seconds]}}. Every process must
    call it at the same point (boundaries between processes are timed together)."""
    return {"stages": measure_stages(pipe, states, base_policy, timing),
            "boundaries": measure_boundaries(pipe, timing)}


def measure_stages(pipe: Pipeline, states: list, base_policy, timing: CostTiming) -> dict:
    """Each local stage: the run's program and (adjusted stages) the base one, and swap."""
    base = models.resolve_policy(base_policy, pipe.cfg.family)
    stages: dict[str, dict] = {}
    first = True
    for s in pipe.local_stages:
        prog, st, spec = pipe.programs[s], states[s], pipe.schedule.stages[s]
        x, targets = stage_inputs(pipe, s)
        split = any(pipe.schedule.effective_kind(a) is Kind.I for a in spec.actions)
        adjusted = spec.adjusted and pipe.policies[s] != base
        t = time_stage(prog, st.params, x, targets, timing, first, split=split,
                       fused=times_fused_backward(split, adjusted))
        first = False
        row = {"adjusted_bwd": t.bwd, "act_bytes_recompute": prog.residual_bytes,
               "weight_bytes": device_bytes((st.params, st.grads, st.opt_state)),
               "boundary_bytes": 0 if prog.returns_loss else prog.output_bytes}
        if adjusted:
            plain = build_program(pipe.cfg, pipe.partition[s], base, prog.mesh, pipe.shape)
            b = time_stage(plain, st.params, x, targets, timing, False)
            row.update(fwd=min(t.fwd, b.fwd), bwd=b.bwd, recompute=max(t.bwd - b.bwd, 0.0),
                       act_bytes=plain.residual_bytes, base_bwd=b.bwd)
            del plain
        else:
            row.update(fwd=t.fwd, bwd=t.bwd, recompute=0.0, act_bytes=prog.residual_bytes, base_bwd=t.bwd)
        if split:   # the simulator adds recompute to I on adjusted stages: I here is without it
            row.update(input_grad=max(t.input_grad - row["recompute"], 0.0), weight_grad=t.weight_grad,
                       weight_grad_held=t.weight_grad_bytes)
        if spec.swap_fraction > 0 and any(a.kind.value == "SO" for a in spec.actions):
            row.update(_time_swap(pipe, prog, st, x, targets, spec.swap_fraction, timing))
        stages[str(s)] = row
    return stages


def measure_boundaries(pipe: Pipeline, timing: CostTiming) -> dict:
    """Every stage boundary this process times, through the run's transport (every
    process calls this together: boundaries between processes are collective)."""
    boundaries = {}
    for b in range(pipe.schedule.num_stages - 1):
        like = (_normal(pipe.boundary_specs[b], pipe.programs[b].batch_sharding, seed=3000 + b)
                if pipe.programs[b] is not None else None)
        seconds = pipe.executor.transport.time_boundary(
            b, b + 1, like, timing.samples, lambda fn, n: median_time(fn, max(n, 3)))
        if seconds is not None:
            boundaries[str(b)] = [pipe.boundary_bytes[b], seconds]
    return boundaries


def _time_swap(pipe: Pipeline, prog, st, x, targets, fraction: float, timing: CostTiming) -> dict:
    """Bytes per second of one block's SO and SI on this stage."""
    _, res = _wait(prog.forward(st.params, x, targets) if prog.returns_loss else prog.forward(st.params, x))
    swap = HostSwap(pipe.executor.swap.mechanism)  # own counters: not the run's
    out = [None]
    t_out = median_time(lambda: out.__setitem__(0, _wait(swap.swap_out(res, fraction, prog.device))),
                        timing.samples)
    moved = out[0].host_bytes
    t_in = median_time(lambda: _wait(swap.swap_in(out[0], prog.device)), timing.samples)
    return {"host_out": moved / t_out, "host_in": moved / t_in} if moved else {}


def combine(parts: list[dict], num_stages: int) -> MeasuredCosts:
    """One MeasuredCosts from every process's `measure_local` part (the same on every
    process given the same parts)."""
    stages: dict[int, dict] = {}
    boundaries: dict[int, list] = {}
    for part in parts:
        stages.update({int(s): row for s, row in part["stages"].items()})
        boundaries.update({int(b): v for b, v in part["boundaries"].items()})
    missing = [s for s in range(num_stages) if s not in stages]
    if missing:
        raise ValueError(f"no measurement of stage {missing[0]}")
    rows = [stages[s] for s in range(num_stages)]
    col = lambda key: tuple(r[key] for r in rows)
    p2p_bytes = sum(v[0] for v in boundaries.values())
    p2p_time = sum(v[1] for v in boundaries.values())
    p2p_bw = p2p_bytes / p2p_time if p2p_time > 0 and p2p_bytes else float("inf")
    host_out = [r["host_out"] for r in rows if "host_out" in r]
    host_in = [r["host_in"] for r in rows if "host_in" in r]
    bw_out = statistics.median(host_out) if host_out else float("inf")
    bw_in = statistics.median(host_in) if host_in else float("inf")
    split = {}
    if any("input_grad" in r for r in rows):   # stages that run no W never read these
        split = {"input_grad": tuple(r.get("input_grad", r["bwd"]) for r in rows),
                 "weight_grad": tuple(r.get("weight_grad", 0.0) for r in rows),
                 "weight_grad_held": tuple(r.get("weight_grad_held", r["act_bytes_recompute"]) for r in rows)}
    costs = StageCosts(fwd=col("fwd"), bwd=col("bwd"), recompute=col("recompute"), act_bytes=col("act_bytes"),
                       act_bytes_recompute=col("act_bytes_recompute"), weight_bytes=col("weight_bytes"),
                       boundary_bytes=col("boundary_bytes"), p2p_bandwidth=p2p_bw,
                       host_bandwidth=min(bw_out, bw_in), **split)
    return MeasuredCosts(costs, col("base_bwd"), col("adjusted_bwd"), bw_out, bw_in)


def measure_costs(pipe: Pipeline, states: list, base_policy, reps: int = 3,
                  timing: CostTiming | None = None) -> MeasuredCosts:
    """Every stage of a single-process pipeline (all stages local)."""
    timing = timing or CostTiming.for_device(pipe.placement.devices[0], reps)
    return combine([measure_local(pipe, states, base_policy, timing)], pipe.schedule.num_stages)
