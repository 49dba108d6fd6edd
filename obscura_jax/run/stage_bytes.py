"""What one device of each stage holds, term by term: the inputs of the memory check
(obscura_jax.run.memory_check), read either before compiling (traced on abstract
shapes: seconds, no device memory touched) or from the compiled programs (XLA's own
sizes). docs/design.md, "Memory on a device", says where each term comes from.

    params, grads, optimizer   parameters, the gradient accumulator (stacked per data
                               shard on a mesh: one shard per device) and the optimizer
                               state (optimizer.init traced with jax.eval_shape), per
                               device of the stage's mesh, by its shardings
    act, act_recompute         residuals one micro-batch keeps under the run's base
                               policy and under the stage's own (traced: the forward's
                               pullback leaves, as the stage program keeps them;
                               compiled: StageProgram.residual_bytes)
    boundary                   what one micro-batch's forward sends on (0 on the last)
    weight_grad_held           what a W holds from its I (compiled only)
    working                    the largest of the stage's programs' XLA scratch plus the
                               outputs it allocates beside inputs still live that the
                               fold does not count: I's block for W, an accumulator XLA
                               could not alias to its donated input (memory_analysis)
    update                     the optimizer step's scratch and unaliased outputs
    measure                    what timing the stage's programs holds beyond every
                               stage's weights (obscura_jax.observe.measure.time_stage)
    runtime                    a step's tokens, targets and losses on the stage's devices
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, replace

import jax
import jax.numpy as jnp

import models
from models.units import leaf_bytes
from obscura_jax.observe.measure import times_fused_backward
from obscura_jax.runtime.executor import compiled_update
from obscura_jax.runtime.pipeline import boundary_device_bytes, boundary_specs, build_program, stage_policies
from obscura_jax.runtime.stage_program import memory_of
from schedules.ir import Kind


@dataclass(frozen=True)
class StageBytes:
    """Bytes one device of stage `stage`'s mesh holds for it (see the module docstring)."""
    stage: int
    params: int
    grads: int
    optimizer: int
    act: float
    act_recompute: float
    boundary: float
    input: float                          # its input per micro-batch (tokens on the first stage)
    weight_grad_held: float | None = None
    working: float = 0.0
    update: float = 0.0
    measure: float = 0.0
    runtime: float = 0.0
    compiled: bool = False

    @property
    def weights(self) -> int:
        return self.params + self.grads + self.optimizer


def traced_residual_bytes(stage, params_like, x_like, targets_like=None) -> int:
    """Bytes of the residuals one micro-batch of `stage` keeps: the leaves of its
    forward's pullback that are not parameters, each once (the stage's input and
    targets included when the backward reads them), traced on abstract shapes."""
    def pullback_leaves(params, x, *targets):
        if stage.is_first:
            fn = (lambda p: stage.apply(p, x, *targets))
            _, back = jax.vjp(fn, params)
        else:
            _, back = jax.vjp(lambda p, h: stage.apply(p, h, *targets), params, x)
        return jax.tree.leaves(back)

    args = (params_like, x_like) + ((targets_like,) if targets_like is not None else ())
    closed = jax.make_jaxpr(pullback_leaves)(*args)
    params = set(closed.jaxpr.invars[:len(jax.tree.leaves(params_like))])
    seen, total = set(), 0
    for v in closed.jaxpr.outvars:
        if isinstance(v, jax.extend.core.Literal) or v in seen or v in params:
            continue
        seen.add(v)
        total += leaf_bytes(v.aval)
    return total


@functools.lru_cache(maxsize=256)    # runs of one process (compare, tests) share their stages
def _stage_residual_bytes(cfg, unit_range, policy, micro_batch: int, seq_len: int) -> int:
    stage = models.build_stage(cfg, unit_range, policy)
    targets = jax.ShapeDtypeStruct((micro_batch, seq_len), jnp.int32) if stage.is_last else None
    params_like = models.stage_params(models.abstract_params(cfg), unit_range, cfg)
    return traced_residual_bytes(stage, params_like, stage.input_spec(micro_batch, seq_len), targets)


@functools.lru_cache(maxsize=256)
def _weights(cfg, unit_range, mesh, optimizer) -> tuple[int, int, int]:
    """(params, grads, optimizer) bytes on one device of `mesh`."""
    params_like = models.stage_params(models.abstract_params(cfg), unit_range, cfg)
    shardings = mesh.param_shardings(cfg, params_like)
    per_leaf = jax.tree.map(lambda a, sh: mesh.shard_bytes(a.shape, a.dtype, sh), params_like, shardings)
    params = sum(jax.tree.leaves(per_leaf))
    state = jax.eval_shape(optimizer.init, params_like)
    tree = jax.tree.structure(params_like)

    def part(x) -> int:    # what optimizer.init shapes like the params is sharded like them
        if jax.tree.structure(x) == tree:
            return sum(mesh.shard_bytes(a.shape, a.dtype, sh) for a, sh in
                       zip(jax.tree.leaves(x), jax.tree.leaves(shardings)))
        return sum(leaf_bytes(a) for a in jax.tree.leaves(x))
    opt = sum(part(x) for x in jax.tree.leaves(state, is_leaf=lambda x: jax.tree.structure(x) == tree))
    return params, params, opt


def traced(cfg, schedule, partition, base_policy, placement, shape, optimizer, local) -> dict[int, StageBytes]:
    """Every local stage's bytes before anything is compiled. On a data x tensor mesh
    the residuals are traced per data shard and divided by the tensor width: a lower
    bound until XLA has chosen their sharding (the compiled figures replace it)."""
    policies = stage_policies(cfg, schedule, base_policy)
    base = models.resolve_policy(base_policy, cfg.family)
    nbytes = boundary_device_bytes(boundary_specs(cfg, partition, shape), placement)
    out = {}
    for s in local:
        mesh, r = placement.mesh(s), tuple(partition[s])
        b = shape.micro_batch_size // mesh.data
        acts = {pol: _stage_residual_bytes(cfg, r, pol, b, shape.seq_len) / mesh.tensor for pol in {base, policies[s]}}
        params, grads, opt = _weights(cfg, r, mesh, optimizer)
        first = models.build_stage(cfg, r)
        x_spec = first.input_spec(b, shape.seq_len)
        out[s] = StageBytes(s, params, grads, opt, acts[base], acts[policies[s]],
                            nbytes[s] if s < len(nbytes) else 0.0, leaf_bytes(x_spec),
                            runtime=_runtime(first, schedule.num_microbatches, b, shape.seq_len))
    return out


def _runtime(stage, m: int, b: int, seq_len: int) -> int:
    """A step's tokens (first stage), targets, losses and loss cotangent (last)."""
    rows = m * b * seq_len * 4                     # int32 token ids
    return (rows if stage.is_first else 0) + ((rows + 4 * m + 4) if stage.is_last else 0)


def _working(prog, kinds=None) -> float:
    """The largest, over the programs of `kinds` (default: every compiled one), of
    a program's scratch plus what it allocates that the fold does not count: I's
    outputs (W's block, beside the residuals it replaces), B's and W's outputs XLA
    could not alias to the donated accumulator."""
    worst = 0.0
    for kind, m in prog.program_memory().items():
        if kinds is None or kind in kinds:
            extra = 0 if kind == Kind.F.value else max(0, m["output"] - m["alias"])
            worst = max(worst, m["temp"] + extra)
    return worst


def _update_bytes(cfg, unit_range, prog, optimizer) -> int:
    """The optimizer step's scratch and its outputs that are not its donated inputs,
    compiled from abstract arrays placed as the run places them (the compilation
    the run then reuses: obscura_jax.runtime.executor.compiled_update caches it)."""
    def put(a, sharding):
        return jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=sharding)
    params_like = models.stage_params(models.abstract_params(cfg), unit_range, cfg)
    params = jax.tree.map(put, params_like, prog.param_shardings)
    tree = jax.tree.structure(params)
    state = jax.tree.map(   # as executor.init_state places it: shaped like the params or replicated
        lambda x: (jax.tree.map(lambda a, p: put(a, p.sharding), x, params) if jax.tree.structure(x) == tree
                   else jax.tree.map(lambda a: put(a, prog.sharding), x)),
        jax.eval_shape(optimizer.init, params_like), is_leaf=lambda x: jax.tree.structure(x) == tree)
    mesh = prog.mesh
    grads = params if mesh.single else jax.tree.map(
        lambda a: put(jax.ShapeDtypeStruct((mesh.data,) + tuple(a.shape), a.dtype), mesh.stacked(a.sharding)), params)
    m = memory_of(compiled_update(optimizer, params, state, grads, stacked=not mesh.single))
    return m["temp"] + max(0, m["output"] - m["alias"])


def compiled(pipe, traced_bytes: dict[int, StageBytes], optimizer, base_policy,
             measure: bool) -> dict[int, StageBytes]:
    """The traced figures corrected by the compiled programs: exact residuals, W's
    block, scratch, the optimizer step; and what measuring each stage holds (its
    base-policy twin compiled for that: the measurement reuses it)."""
    base = models.resolve_policy(base_policy, pipe.cfg.family)
    out = {}
    for s, t in traced_bytes.items():
        prog, spec = pipe.programs[s], pipe.schedule.stages[s]
        split = any(a.kind is Kind.W for a in spec.actions)
        twin = (build_program(pipe.cfg, pipe.partition[s], base, prog.mesh, pipe.shape)
                if measure and pipe.policies[s] != base else None)
        act = twin.residual_bytes if twin is not None else (prog.residual_bytes if pipe.policies[s] == base
                                                            else t.act)
        steps = ("F", "I", "W") if split else ("F", "B")    # the programs the schedule runs
        row = replace(t, act=act, act_recompute=prog.residual_bytes,
                      weight_grad_held=prog.weight_grad_held_bytes if split else None, working=_working(prog, steps),
                      update=_update_bytes(pipe.cfg, pipe.partition[s], prog, optimizer), compiled=True)
        if measure:
            if times_fused_backward(split, twin is not None):
                prog.compile_fused()    # the measurement times this stage's B (compiled once, for it)
            swap = spec.swap_fraction if any(a.kind is Kind.SO for a in spec.actions) else 0.0
            cost = measure_bytes(replace(row, working=_working(prog)), prog, split, swap)
            if twin is not None:
                cost = max(cost, measure_bytes(replace(row, act_recompute=twin.residual_bytes,
                                                       working=_working(twin)), twin, False, 0.0))
            row = replace(row, measure=cost)
        out[s] = row
    return out


def measure_bytes(row: StageBytes, prog, split: bool, swap_fraction: float) -> float:
    """What timing one stage's programs holds beyond the weights (time_stage): its
    input and a cotangent, then the largest of two forwards' outputs (one kept while
    the next is made), one forward's residuals with a fresh accumulator and two input
    gradients, the same with two I outputs (split), or the residuals with their
    swapped share back (swap); plus its largest program's working bytes."""
    res, out = row.act_recompute, prog.output_bytes
    dx = row.input if not prog.takes_tokens else 0.0
    i_out = max(0, prog.program_memory().get(Kind.I.value, {}).get("output", 0)) if split else 0
    held = [2 * (res + out), res + row.grads + 2 * dx]
    if split:
        held.append(res + row.grads + 2 * i_out)
    if swap_fraction:
        held.append(res * (1 + swap_fraction))
    return row.input + out + max(held) + row.working
