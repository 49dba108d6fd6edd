"""Planning for stages on a data x tensor mesh (`obscura plan --data-parallel D
--tensor-parallel T`): the profile a device of such a stage sees, and the
data-parallel gradient all-reduce on the plan's time.

A profile measured (or derived) at micro-batch b on one device becomes one device's
profile of a D x T stage mesh by planner.layouts.mesh_costs (the description the
layout sweep uses too): the micro-batch splits over D (b/D rows a device), what
tensor parallelism splits divides by T, each unit gains its TP collectives, and its
training state is what the runtime keeps on a device (parameters and gradients as
the family's registration shards them, Adam's moments sharded like them). Every planning
step then runs on that profile unchanged: the plan's memory limit, peaks and times
are per device. Which ops' time TP divides is read from the analytic roofline at the
profile's shape (planner.layouts.unit_costs.unit_splits) on the profile's device
when planner.device describes it, else the H200 (shares only: the profile's own
times stay). TP and data collectives are priced on planner.layouts.hardware's
defaults (8-GPU NVLink nodes at 360 GB/s, 45 GB/s between nodes).

Kept bytes are checked against the traced residuals (planner.recompute.residuals) at b/D
rows where the model is registered: the excess of the traced figure over the
additive one (non-additive sets, e.g. q recomputed while q_rope is saved) is added
undivided by T, which bounds it whatever the excess is made of.

The data all-reduce is not simulated: each stage sums its gradient accumulators
over D once per step after its last backward (obscura_jax/runtime/stage_mesh.py), so the
plan's time is the simulated makespan or, if later, the last stage's sync end
(mesh_costs.gradient_sync_end without overlap). It is added to the chosen plan
and to every baseline alike; it does not steer the search.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Mapping

import numpy as np

from models.config import CONFIGS, ModelConfig
from models.errors import ObscuraError
from models.tensor_parallel import check_tensor_parallel
from models.units import unit_param_count
from planner.device import DEVICES, DeviceSpec
from planner.errors import PlanError
from planner.layouts.hardware import Hardware
from planner.layouts.memory import params_per_gpu
from planner.layouts.mesh_costs import (MeshLayout, StageSync, data_parallel_seconds, device_weight_bytes,
                                        gradient_sync_end, mesh_profile, tp_collectives)
from planner.layouts.unit_costs import unit_splits
from planner.plans.plan_meta import PlanSource
from planner.profile import OPTIONAL_UNIT_KEYS, UNIT_KINDS, OpProfile, Profile, UnitProfile
from planner.recompute.residuals import UnitKept, exact_unit_kept
from schedules.simulator import simulate

def scale_micro_batch(profile: Profile, micro_batch: int) -> Profile:
    """An ESTIMATE of the profile at another micro-batch: every time and every
    per-micro-batch byte count (activations, inputs, W's held block, scratch) scaled
    by the ratio of rows, weights unchanged. Linear in rows is what a transformer's
    matmuls and activations are to first order; small micro-batches run below the
    device's peak, so times at more rows than measured tend to be overestimated.
    Measured figures: `obscura profile --micro-batch N`."""
    if isinstance(micro_batch, bool) or not isinstance(micro_batch, int) or micro_batch < 1:
        raise PlanError(f"micro_batch must be a positive integer, got {micro_batch!r}")
    f = micro_batch / profile.micro_batch

    def scaled(u: UnitProfile) -> UnitProfile:
        opt = {k: (getattr(u, k) * f if getattr(u, k) is not None else None) for k in OPTIONAL_UNIT_KEYS}
        ops = tuple((n, OpProfile(o.fwd_time * f, o.act_bytes * f)) for n, o in u.ops)
        return replace(u, fwd_time=u.fwd_time * f, bwd_time=u.bwd_time * f, input_bytes=u.input_bytes * f,
                       ops=ops, **opt)
    layer = profile.layer_recompute_time
    return replace(profile, micro_batch=micro_batch, units=tuple((k, scaled(u)) for k, u in profile.units),
                   layer_recompute_time=None if layer is None else layer * f)


def profile_model(profile: Profile) -> ModelConfig:
    """The registered model config a profile describes, at its layer count (a
    derived "llama2-13b@88L" is llama2-13b with 88 layers)."""
    base = PlanSource.of_profile(profile).base_model
    if base not in CONFIGS:
        raise PlanError(f"planning for a stage mesh needs the profile's model registered (to know how it "
                        f"shards): {profile.model!r} is not (a model of your own: --model-module)")
    return CONFIGS[base].replace(num_layers=profile.num_layers)


def profile_device(profile: Profile) -> DeviceSpec:
    """The described device whose name the profile's device string contains, else the H200."""
    for name, spec in DEVICES.items():
        if name.split("-")[0].lower() in profile.device.lower():
            return spec
    return DEVICES["H200"]


@dataclass(frozen=True)
class MeshPlanning:
    """One planning problem's stage mesh: the per-device profile and what prices its sync."""
    layout: MeshLayout
    cfg: ModelConfig
    profile: Profile                 # one device's
    unit_kept: UnitKept | None       # traced kept bytes per device, or None (additive only)
    hardware: Hardware

    def stage_params(self, units: tuple[int, int]) -> float:
        """Parameters one device of the stage over `units` holds (and syncs)."""
        kinds = list(self.profile.kinds[units[0]:units[1]])
        return params_per_gpu(kinds, self.cfg, self.layout.tensor)

    def synced_time(self, evaluation) -> float:
        """An evaluation's iteration: its makespan, or later the end of the last
        stage's gradient all-reduce over D (the module docstring)."""
        if self.layout.data == 1:
            return evaluation.makespan
        grad = float(np.dtype(self.cfg.param_dtype).itemsize)
        syncs = [StageSync(data_parallel_seconds(self.stage_params(units), grad, grad, self.layout,
                                                 self.hardware, zero1=False)[0])
                 for units in evaluation.config.partition]
        timeline = simulate(evaluation.schedule, evaluation.costs, check=False)
        end, _ = gradient_sync_end(timeline, syncs, overlap_backward=False)
        return max(evaluation.makespan, end)

    def timed(self, plan, best, baselines: Mapping):
        """The plan with its time and its baselines' times synced, and its layout."""
        base = tuple((name, None if v is None else self.synced_time(baselines[name])) for name, v in plan.baselines)
        return replace(plan, predicted_iteration_time=self.synced_time(best), baselines=base,
                       data_parallel=self.layout.data, tensor_parallel=self.layout.tensor)


def plan_mesh(profile: Profile, layout: MeshLayout, hardware: Hardware | None = None,
              exact_residuals: bool = True) -> MeshPlanning:
    """`profile` (at its micro-batch b on one device) for stages on `layout`; PlanError
    (one line) when the model cannot shard over T or b does not split over D."""
    hw = hardware or Hardware()
    cfg = profile_model(profile)
    try:
        check_tensor_parallel(cfg, layout.tensor)
    except ObscuraError as e:
        raise PlanError(f"tensor parallelism {layout.tensor}: {e}") from None
    if profile.micro_batch % layout.data:
        raise PlanError(f"the profile's micro-batch {profile.micro_batch} is not divisible by data parallelism "
                        f"{layout.data} (each micro-batch splits over the data axis)")
    rows = profile.micro_batch // layout.data
    splits = unit_splits(cfg, profile.seq_len, rows, cfg.attention_impl or "cudnn", profile_device(profile))
    tokens = float(profile.seq_len * rows)
    comms = {k: tp_collectives(k, cfg, tokens, layout, hw) for k in UNIT_KINDS}
    weights = {}
    param_bytes = float(np.dtype(cfg.param_dtype).itemsize)
    for k in UNIT_KINDS:
        n, on_device = unit_param_count(cfg, k), params_per_gpu([k], cfg, layout.tensor)
        weights[k] = device_weight_bytes(profile.unit(k), n, on_device, param_bytes,
                                         on_device)  # Adam's moments sharded like the params (executor)
    device = mesh_profile(profile, layout, splits, comms, weights)
    kept = _mesh_unit_kept(profile, device, layout, splits) if exact_residuals else None
    return MeshPlanning(layout, cfg, device, kept, hw)


def _mesh_unit_kept(profile: Profile, device: Profile, layout: MeshLayout, splits) -> UnitKept | None:
    """Traced kept bytes per device (the module docstring), or None without a trace."""
    rows = mesh_profile(profile, MeshLayout(layout.data), splits, {}, {k: profile.unit(k).weight_bytes
                                                                        for k in UNIT_KINDS})
    traced = exact_unit_kept(rows)
    if traced is None or layout.tensor == 1:
        return traced

    def kept(kind: str, recompute: frozenset) -> float:
        excess = traced(kind, recompute) - rows.unit(kind).kept_bytes(recompute)
        return device.unit(kind).kept_bytes(recompute) + max(0.0, excess)
    return kept
