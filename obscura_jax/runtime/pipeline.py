"""Stage placement: a model, a partition, per-stage policies and a Schedule ->
compiled stage programs on their devices and the executor that runs them.

Policy rule: a stage the schedule marks adjusted (StageSpec.recompute non-empty)
runs that recompute set; every other stage runs the run's base policy.

With several processes (a ProcessGroup other than the single one) each process
compiles and holds only its own stages (`local_stages`); the shapes of the messages
between stages (`boundary_specs`) come from the model, so every process knows them.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import jax
import numpy as np

import models
from models.units import leaf_bytes
from obscura_jax.run.data import BatchShape
from obscura_jax.errors import RunError
from obscura_jax.runtime.executor import PipelineExecutor, StageState
from obscura_jax.runtime.placement import Placement
from obscura_jax.processes.process_group import SINGLE, ProcessGroup
from obscura_jax.runtime.stage_mesh import StageMesh, single
from obscura_jax.runtime.stage_program import StageProgram
from obscura_jax.runtime.swap import HostSwap, host_memory_supported
from obscura_jax.runtime.transport import Transport
from obscura_jax.runtime.weight_grad import WeightGrad
from planner.costs import check_partition
from planner.errors import PlanError
from schedules.actions import effective_kind
from schedules.ir import Kind, Schedule


def stage_policies(cfg, schedule: Schedule, base_policy) -> list:
    """RecomputePolicy per stage: the schedule's set on adjusted stages, else the base
    (a name, op list or RecomputePolicy). Adjusted stages offload what the base
    offloads, less the ops they recompute (a `layer` stage offloads nothing)."""
    base = models.resolve_policy(base_policy, cfg.family)

    def adjusted(recompute) -> models.RecomputePolicy:
        pol = models.resolve_policy(list(recompute), cfg.family)
        offload = base.offload - pol.recompute
        return models.resolve_policy(pol, cfg.family, offload=sorted(offload)) if offload and not pol.layer else pol
    return [adjusted(spec.recompute) if spec.adjusted else base for spec in schedule.stages]


def stage_ranges(cfg, partition, num_stages: int) -> tuple[tuple[int, int], ...]:
    """The partition as one unit range per stage of the schedule: as many ranges as
    stages, tiling the model (planner.costs.check_partition, the one rule)."""
    if len(partition) != num_stages:
        raise RunError(f"partition has {len(partition)} stages, the schedule {num_stages}")
    try:
        return check_partition(partition, cfg.num_units)
    except PlanError as e:
        raise RunError(f"partition {[list(p) for p in partition]} does not fit {cfg.name}: {e}") from None


@functools.lru_cache(maxsize=256)
def build_program(cfg, unit_range, policy, where, shape: BatchShape, split: bool = False,
                  weight_grad: WeightGrad = WeightGrad()) -> StageProgram:
    """Compiled stage program on `where` (a device or a StageMesh); cached, since
    programs are immutable once built and pipelines in one process (compare, tests)
    share most stages. `split`: a stage that runs I/W only (its fused backward
    compiles on first use); `weight_grad`: how its split backward's W gets its
    inputs (obscura_jax.runtime.weight_grad). 256: every family of the zoo trained on 4 devices of
    one process, then two plans (tests/obscura_jax/command_matrix.py, gpt3-tiny),
    use 68 distinct programs (8-stage partitions of the chunked families, adjusted
    stages and their base-policy twins); 64 evicted 16, which were built again. A
    program holds compiled code and specs, no arrays."""
    mesh = where if isinstance(where, StageMesh) else single(where)
    # a unit's auxiliary loss joins the mean loss of the m micro-batches at 1/m
    # (models.aux_loss); on D data shards each shard's at 1/(m D)
    stage = models.build_stage(cfg, unit_range, policy, aux_weight=1.0 / (shape.microbatches * mesh.data))
    x_like = stage.input_spec(shape.micro_batch_size, shape.seq_len)
    targets_like = (jax.ShapeDtypeStruct((shape.micro_batch_size, shape.seq_len), np.int32)
                    if stage.is_last else None)
    params_like = _abstract_stage_params(cfg, unit_range)
    return StageProgram(stage.apply, takes_tokens=stage.is_first, returns_loss=stage.is_last,
                        mesh=mesh, param_shardings=mesh.param_shardings(cfg, params_like),
                        params_like=params_like, x_like=x_like, targets_like=targets_like,
                        name=f"stage units [{unit_range[0]},{unit_range[1]})", split=split,
                        weight_grad_mode=weight_grad.mode,
                        at_once_units=weight_grad.at_once_units(cfg, unit_range, shape.seq_len,
                                                                shape.micro_batch_size))


def _abstract_stage_params(cfg, unit_range) -> dict:
    return models.stage_params(models.abstract_params(cfg), unit_range, cfg)


def boundary_specs(cfg, parts, shape: BatchShape) -> tuple:
    """Shape/dtype of what crosses each stage boundary (stage b's output, b < p-1)."""
    return tuple(models.build_stage(cfg, r).output_spec(shape.micro_batch_size, shape.seq_len)
                 for r in parts[:-1])


def boundary_device_bytes(specs, placement: Placement) -> list[int]:
    """Bytes of each boundary's message on one device of its consumer's mesh (the
    micro-batch splits over data, the activation is whole over tensor)."""
    return [placement.mesh(b + 1).shard_bytes(sp.shape, sp.dtype, placement.mesh(b + 1).batch)
            for b, sp in enumerate(specs)]


@dataclass
class Pipeline:
    """Everything needed to train one schedule: programs, executor, placement."""
    cfg: object
    schedule: Schedule
    partition: tuple[tuple[int, int], ...]
    policies: list
    placement: Placement
    shape: BatchShape
    programs: list[StageProgram | None]     # None: a stage of another process
    executor: PipelineExecutor
    boundary_specs: tuple = ()
    group: ProcessGroup = SINGLE

    @property
    def local_stages(self) -> list[int]:
        return self.executor.local

    @property
    def boundary_bytes(self) -> list[int]:
        """Per device of the consumer's mesh (the whole message on one device)."""
        return boundary_device_bytes(self.boundary_specs, self.placement)

    def init_state(self, seed: int) -> list[StageState | None]:
        """Each local stage's units (equal to slicing the whole model's) are made one
        at a time on this process's default device and placed by their stage's
        shardings at once, so no device ever holds more than its own stage and one
        unit. One device, not each stage's own: a jitted init is traced, lowered
        and loaded again for every device it runs on (~0.3 CPU-s each for
        llama2-tiny's three unit kinds), and the values are the same on any device.
        The default device is the one the reference model (obscura_jax.run.checks)
        initialises on too."""
        params: list = [None] * len(self.programs)
        for s in self.local_stages:
            shardings, (start, end) = self.programs[s].param_shardings, self.partition[s]
            params[s] = {}
            for i in range(start, end):
                unit = models.init_params(self.cfg, seed, unit_range=(i, i + 1))
                params[s].update(jax.device_put(unit, {name: shardings[name] for name in unit}))
        return self.executor.init_state(params)

    def stage_row(self, s: int) -> dict:
        """What the run's summary says about local stage s."""
        r, prog, spec = self.partition[s], self.programs[s], self.schedule.stages[s]
        return {"units": list(r), "unit_names": models.unit_names(self.cfg)[r[0]:r[1]],
                "device": self.placement.mesh(s).describe(), "policy": self.policies[s].to_json(),
                "adjusted": spec.adjusted, "swap_fraction": spec.swap_fraction,
                "swap_blocks": spec.swap_blocks, "residual_bytes_per_microbatch": prog.residual_bytes,
                "residual_host_bytes_per_microbatch": prog.residual_host_bytes,
                "residual_memory_kinds": prog.residual_memory_kinds,
                "offload_bytes_per_iteration": offload_traffic(prog, spec, self.executor.split),
                "param_bytes": prog.params_bytes, "weight_grad_held_bytes_per_microbatch": prog.weight_grad_held_bytes,
                "weight_grad_at_once": sorted(prog.at_once_units)}


def offload_traffic(prog: StageProgram, spec, split) -> dict:
    """Bytes a stage's programs move to host memory and back in one iteration for its
    policy's offload set: each F writes the offloaded residuals, each B (or I) reads
    them, each W reads the offloaded leaves it holds. `split`: the executor's
    (stage, micro-batch) pairs whose backward is split."""
    counts = {kind: 0 for kind in Kind}
    for a in spec.actions:
        counts[effective_kind(a.kind, (a.stage, a.microbatch) in split)] += 1
    reads = (counts[Kind.B] + counts[Kind.I]) * prog.residual_host_bytes + counts[Kind.W] * prog.weight_grad_host_bytes
    return {"to_host": counts[Kind.F] * prog.residual_host_bytes, "from_host": reads}


def build_pipeline(cfg, schedule: Schedule, partition, base_policy, placement: Placement,
                   shape: BatchShape, optimizer, order, *, swap_mechanism: str = "device_put",
                   swap_enabled: bool = True, group: ProcessGroup = SINGLE,
                   weight_grad: WeightGrad = WeightGrad()) -> Pipeline:
    """Compile this process's stages (all of them in a single process) and the
    executor that runs them."""
    p = schedule.num_stages
    parts = stage_ranges(cfg, partition, p)
    if placement.num_stages != p:
        raise ValueError(f"placement has {placement.num_stages} stages, the schedule {p}")
    swapping = any(spec.swap_fraction > 0 and any(a.kind.value == "SO" for a in spec.actions)
                   for spec in schedule.stages)
    local = [s for s in range(p) if any(group.owns(d) for d in placement.mesh(s).devices)]
    if swapping and swap_enabled:
        bad = [s for s in local if not all(host_memory_supported(d) for d in placement.mesh(s).devices)]
        if bad:
            raise RunError(f"stage {bad[0]}'s device {placement.devices[bad[0]]} has no pinned_host "
                             "memory: swapping is not possible there")
    policies = stage_policies(cfg, schedule, base_policy)
    split = [any(a.kind is Kind.W for a in spec.actions) for spec in schedule.stages]
    programs = [build_program(cfg, r, pol, placement.mesh(s), shape, split[s], weight_grad) if s in local else None
                for s, (r, pol) in enumerate(zip(parts, policies))]
    specs = boundary_specs(cfg, parts, shape)
    nbytes = boundary_device_bytes(specs, placement)
    shardings = [placement.mesh(s).batch for s in range(p)]
    # stage meshes across processes: every process runs every stage on its own data
    # shards, and messages stay in their process (stage_mesh.move)
    transport = (Transport(placement.devices, nbytes, shardings) if placement.spans_processes
                 else group.transport(placement.devices, specs, nbytes, shardings))
    executor = PipelineExecutor(schedule, programs, optimizer, order, swap=HostSwap(swap_mechanism),
                                swap_enabled=swap_enabled, stage_devices=placement.devices,
                                transport=transport)
    return Pipeline(cfg, schedule, parts, policies, placement, shape, programs, executor, specs, group)
