"""Costs measured on the devices of a run, for the simulator (StageCosts).

Each stage's forward and backward are timed standalone (one at a time, blocking,
median of `reps` after one warm run), so `simulate(schedule, costs)` predicts what
the same run would take with perfect overlap. Adjusted stages are also compiled
with the run's base policy: bwd = the base backward, recompute = the adjusted
backward minus it (the simulator adds it back on adjusted stages), act_bytes = the
base residuals, act_bytes_recompute = the adjusted residuals. Transfers (stage to
stage, device to host) are timed the same way. The optimizer step is timed in the
run itself (trainer: the recorded iteration), not here: timing it standalone would
need a copy of a stage's whole training state.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import jax
import jax.numpy as jnp

import models
from obscura_jax.engine import Pipeline, build_program
from obscura_jax.executor import StageState
from obscura_jax.stage_program import Residuals, StageProgram
from obscura_jax.swap import HostSwap
from schedules.costs import StageCosts


def tree_bytes(tree) -> int:
    return sum(int(x.nbytes) for x in jax.tree.leaves(tree) if hasattr(x, "nbytes"))


def _wait(result):
    """Block on every array in a result, Residuals included (not a pytree)."""
    if isinstance(result, Residuals):
        jax.block_until_ready(result.leaves)
    elif isinstance(result, tuple):
        for r in result:
            _wait(r)
    else:
        jax.block_until_ready(result)
    return result


def timed(fn, reps: int) -> float:
    """Median seconds of fn() (which must block), after one untimed warm run."""
    fn()
    samples = []
    for _ in range(max(reps, 1)):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


@dataclass(frozen=True)
class StageTiming:
    fwd: float
    bwd: float
    residual_bytes: int


def time_stage(prog: StageProgram, params, x, targets, reps: int) -> StageTiming:
    """Standalone forward and backward seconds of one program on its device."""
    dy = prog.loss_weight(1) if prog.returns_loss else jnp.ones(prog.output_spec.shape, prog.output_spec.dtype,
                                                                device=prog.sharding)
    fwd_args = (params, x, targets) if prog.returns_loss else (params, x)
    t_fwd = timed(lambda: _wait(prog.forward(*fwd_args)), reps)
    _, res = prog.forward(*fwd_args)
    grads = [prog.zero_grads(params)]

    def bwd():
        grads[0], _, done = prog.backward(params, res, dy, grads[0])
        jax.block_until_ready(done)
        jax.block_until_ready(grads[0])
    t_bwd = timed(bwd, reps)
    return StageTiming(t_fwd, t_bwd, prog.residual_bytes)


def _stage_inputs(pipe: Pipeline, s: int):
    prog = pipe.programs[s]
    b, t = pipe.shape.micro_batch_size, pipe.shape.seq_len
    if prog.takes_tokens:
        x = jax.device_put(jnp.zeros((b, t), jnp.int32), prog.sharding)
    else:
        prev = pipe.programs[s - 1].output_spec
        x = jax.device_put(jnp.full(prev.shape, 0.1, prev.dtype), prog.sharding)
    targets = jax.device_put(jnp.zeros((b, t), jnp.int32), prog.sharding) if prog.returns_loss else None
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
        return {"fwd": c.fwd, "bwd": c.bwd, "recompute": c.recompute, "act_bytes": c.act_bytes,
                "act_bytes_recompute": c.act_bytes_recompute, "weight_bytes": c.weight_bytes,
                "boundary_bytes": c.boundary_bytes, "p2p_bandwidth": c.p2p_bandwidth,
                "host_bandwidth": c.host_bandwidth, "host_bandwidth_out": self.host_bandwidth_out,
                "host_bandwidth_in": self.host_bandwidth_in}


def _time_transfer(x, sharding, reps: int) -> float:
    return timed(lambda: jax.block_until_ready(jax.device_put(x, sharding)), reps)


def measure_costs(pipe: Pipeline, states: list[StageState], base_policy, reps: int = 3) -> MeasuredCosts:
    p = pipe.schedule.num_stages
    fwd, bwd, rec, act, act_rec, weight, boundary = ([] for _ in range(7))
    base_bwd, adj_bwd = [], []
    host_out, host_in = [], []
    base = models.resolve_policy(base_policy, pipe.cfg.family)
    for s, (prog, st, spec) in enumerate(zip(pipe.programs, states, pipe.schedule.stages)):
        x, targets = _stage_inputs(pipe, s)
        timing = time_stage(prog, st.params, x, targets, reps)
        if spec.adjusted and pipe.policies[s] != base:
            plain = build_program(pipe.cfg, pipe.partition[s], base, prog.device, pipe.shape)
            base_timing = time_stage(plain, st.params, x, targets, reps)
            fwd.append(min(timing.fwd, base_timing.fwd))
            bwd.append(base_timing.bwd)
            rec.append(max(timing.bwd - base_timing.bwd, 0.0))
            act.append(plain.residual_bytes)
            del plain
        else:
            base_timing = timing
            fwd.append(timing.fwd)
            bwd.append(timing.bwd)
            rec.append(0.0)
            act.append(prog.residual_bytes)
        base_bwd.append(base_timing.bwd)
        adj_bwd.append(timing.bwd)
        act_rec.append(prog.residual_bytes)
        weight.append(tree_bytes(st.params) + tree_bytes(st.grads) + tree_bytes(st.opt_state))
        boundary.append(0 if prog.returns_loss else prog.output_bytes)
        if spec.swap_fraction > 0 and any(a.kind.value == "SO" for a in spec.actions):
            _, res = (prog.forward(st.params, x, targets) if prog.returns_loss else prog.forward(st.params, x))
            swap = HostSwap(pipe.executor.swap.mechanism)  # own counters: not the run's
            out = [None]
            t_out = timed(lambda: out.__setitem__(0, _wait(swap.swap_out(res, spec.swap_fraction, prog.device))),
                          reps)
            moved = out[0].host_bytes
            t_in = timed(lambda: _wait(swap.swap_in(out[0], prog.device)), reps)
            if moved:
                host_out.append(moved / t_out)
                host_in.append(moved / t_in)

    p2p_bytes, p2p_time = 0, 0.0
    for s in range(p - 1):
        a, b = pipe.placement.devices[s], pipe.placement.devices[s + 1]
        if a.id == b.id:
            continue
        spec = pipe.programs[s].output_spec
        y = jax.device_put(jnp.zeros(spec.shape, spec.dtype), pipe.programs[s].sharding)
        p2p_time += _time_transfer(y, pipe.programs[s + 1].sharding, reps)
        p2p_bytes += pipe.programs[s].output_bytes
    p2p_bw = p2p_bytes / p2p_time if p2p_time > 0 and p2p_bytes else float("inf")
    bw_out = statistics.median(host_out) if host_out else float("inf")
    bw_in = statistics.median(host_in) if host_in else float("inf")
    host_bw = min(bw_out, bw_in)
    costs = StageCosts(fwd=tuple(fwd), bwd=tuple(bwd), recompute=tuple(rec), act_bytes=tuple(act),
                       act_bytes_recompute=tuple(act_rec), weight_bytes=tuple(weight),
                       boundary_bytes=tuple(boundary), p2p_bandwidth=p2p_bw, host_bandwidth=host_bw)
    return MeasuredCosts(costs, tuple(base_bwd), tuple(adj_bwd), bw_out, bw_in)
