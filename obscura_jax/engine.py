"""Stage placement: a model, a partition, per-stage policies and a Schedule ->
compiled stage programs on their devices and the executor that runs them.

Policy rule: a stage the schedule marks adjusted (StageSpec.recompute non-empty)
runs that recompute set; every other stage runs the run's base policy.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import jax
import numpy as np

import models
from obscura_jax.data import BatchShape
from obscura_jax.executor import PipelineExecutor, StageState
from obscura_jax.placement import Placement
from obscura_jax.stage_program import StageProgram
from obscura_jax.swap import HostSwap, host_memory_supported
from schedules.ir import Schedule


def stage_policies(cfg, schedule: Schedule, base_policy) -> list:
    """RecomputePolicy per stage: the schedule's set on adjusted stages, else the base."""
    base = models.resolve_policy(base_policy, cfg.family)
    return [models.resolve_policy(list(spec.recompute), cfg.family) if spec.adjusted else base
            for spec in schedule.stages]


def check_partition(cfg, partition, num_stages: int) -> tuple[tuple[int, int], ...]:
    parts = tuple((int(a), int(b)) for a, b in partition)
    if len(parts) != num_stages:
        raise ValueError(f"partition has {len(parts)} stages, the schedule {num_stages}")
    if parts[0][0] != 0 or parts[-1][1] != cfg.num_units or any(
            parts[i][1] != parts[i + 1][0] for i in range(len(parts) - 1)):
        raise ValueError(f"partition {[list(p) for p in parts]} does not tile the {cfg.num_units} units "
                         f"of {cfg.name} contiguously")
    return parts


@functools.lru_cache(maxsize=64)
def build_program(cfg, unit_range, policy, device, shape: BatchShape) -> StageProgram:
    """Compiled stage program; cached, since programs are immutable once built and
    pipelines in one process (compare, tests) share most stages."""
    stage = models.build_stage(cfg, unit_range, policy)
    x_like = stage.input_spec(shape.micro_batch_size, shape.seq_len)
    targets_like = (jax.ShapeDtypeStruct((shape.micro_batch_size, shape.seq_len), np.int32)
                    if stage.is_last else None)
    params_like = _abstract_stage_params(cfg, unit_range)
    return StageProgram(stage.apply, takes_tokens=stage.is_first, returns_loss=stage.is_last,
                        device=device, params_like=params_like, x_like=x_like,
                        targets_like=targets_like, name=f"stage units [{unit_range[0]},{unit_range[1]})")


def _abstract_stage_params(cfg, unit_range) -> dict:
    return models.stage_params(models.abstract_params(cfg), unit_range, cfg)


@dataclass
class Pipeline:
    """Everything needed to train one schedule: programs, executor, placement."""
    cfg: object
    schedule: Schedule
    partition: tuple[tuple[int, int], ...]
    policies: list
    placement: Placement
    shape: BatchShape
    programs: list[StageProgram]
    executor: PipelineExecutor

    def init_state(self, seed: int) -> list[StageState]:
        """Each stage initialises its own units (equal to slicing the whole model's)
        directly on its device, so no device ever holds the whole model."""
        params = []
        for r, dev in zip(self.partition, self.placement.devices):
            with jax.default_device(dev):
                params.append(models.init_params(self.cfg, seed, unit_range=r))
        return self.executor.init_state(params)

    def stage_rows(self) -> list[dict]:
        return [{"units": list(r), "unit_names": models.unit_names(self.cfg)[r[0]:r[1]],
                 "device": str(d), "policy": pol.to_json(), "adjusted": spec.adjusted,
                 "swap_fraction": spec.swap_fraction, "swap_blocks": spec.swap_blocks,
                 "residual_bytes_per_microbatch": prog.residual_bytes,
                 "param_bytes": prog.params_bytes}
                for r, d, pol, spec, prog in zip(self.partition, self.placement.devices, self.policies,
                                                 self.schedule.stages, self.programs)]


def build_pipeline(cfg, schedule: Schedule, partition, base_policy, placement: Placement,
                   shape: BatchShape, optimizer, order, *, swap_mechanism: str = "device_put",
                   swap_enabled: bool = True) -> Pipeline:
    p = schedule.num_stages
    parts = check_partition(cfg, partition, p)
    if placement.num_stages != p:
        raise ValueError(f"placement has {placement.num_stages} stages, the schedule {p}")
    swapping = any(spec.swap_fraction > 0 and any(a.kind.value == "SO" for a in spec.actions)
                   for spec in schedule.stages)
    if swapping and swap_enabled:
        bad = [s for s, d in enumerate(placement.devices) if not host_memory_supported(d)]
        if bad:
            raise ValueError(f"stage {bad[0]}'s device {placement.devices[bad[0]]} has no pinned_host "
                             "memory: swapping is not possible there")
    policies = stage_policies(cfg, schedule, base_policy)
    programs = [build_program(cfg, r, pol, dev, shape)
                for r, pol, dev in zip(parts, policies, placement.devices)]
    executor = PipelineExecutor(schedule, programs, optimizer, order,
                                swap=HostSwap(swap_mechanism), swap_enabled=swap_enabled)
    return Pipeline(cfg, schedule, parts, policies, placement, shape, programs, executor)
