"""How a stage's data x tensor mesh divides the stage's costs: the one description
the planner (`obscura plan --data-parallel D --tensor-parallel T`, planner.mesh_plan)
and the layout sweep (planner.layouts.sweep) share.

A stage on D x T devices (obscura_jax/runtime/stage_mesh.py) costs each of its devices:

  micro-batch   b/D rows of every micro-batch of b. A profile measured (or derived)
                at b on one device is taken as linear in the batch, the profile
                format's own assumption: every per-micro-batch time and byte scales
                by 1/D. Bytes are exact (array shapes); times are optimistic where a
                kernel on b/D rows runs below its rate on b.
  tensor        the ops Megatron tensor parallelism splits (planner.layouts.op_work's
                `tp_split`, in the unit kinds the family's registration shards:
                models.tensor_parallel) divide their time and kept bytes by T. Norms,
                residual adds, a unit's input and every op of a kind the registry
                leaves whole (the embedding, in both built-in families) stay whole
                on every device, unless sequence parallelism (SP: the sweep's; the
                runtime has none) divides them too. A unit's forward, backward and
                full-recompute seconds divide in the proportion the analytic
                roofline puts in split ops (`UnitSplit`, planner.layouts.unit_costs).
  collectives   each unit's TP collectives (`tp_collectives`): attention and MLP one
                all-reduce of the [tokens, hidden] activation forward (after the row
                layer) and one backward (the column layers' input gradient); the
                head's cross-entropy all-reduces a max and a sum per token forward
                and its input gradient backward. SP trades each all-reduce for a
                reduce-scatter + all-gather and regathers the input of a recomputed
                column-parallel GEMM. Never overlapped with compute.
  weights       parameters and gradients: what the registry splits divided by T, the
                rest whole (planner.layouts.memory.params_per_gpu); the optimizer's
                moments as the runtime places them (`device_weight_bytes`; the
                planner: planner.mesh_plan). Data parallelism replicates them: the
                runtime keeps one gradient accumulator per data shard (params/T on
                each device) and no ZeRO.
  W's block     (split backward) what a W holds divides by D only: weight ops'
                inputs (often replicated) and output cotangents (split) in
                proportions a profile does not record, so whole is the safe figure.
  data sync     the data-parallel gradient collective, once per step per stage
                after its last backward (B or W): `gradient_sync_end`, a lane per device
                of the list scheduler (schedules.scheduling.list_schedule).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Sequence

from models.config import ModelConfig
from models.registry import get_family
from models.tensor_parallel import TENSOR_AXIS, tensor_specs
from models.units import abstract_unit_params
from planner.errors import PlanError
from planner.layouts.hardware import Hardware
from planner.profile import OpProfile, Profile, UnitProfile, UNIT_KINDS
from schedules.scheduling.list_schedule import lane_run, list_schedule

# The first column-parallel GEMM of each (family, unit kind): it pays SP's regather.
FIRST_COLUMN_PARALLEL = {("llama", "attn"): "q", ("gpt", "attn"): "qkv",
                         ("llama", "mlp"): "mlp_gate", ("gpt", "mlp"): "mlp_up"}


@dataclass(frozen=True)
class MeshLayout:
    """One stage's devices: `data` x `tensor`, and whether SP shards the rest."""
    data: int = 1
    tensor: int = 1
    sequence_parallel: bool = False

    def __post_init__(self) -> None:
        for name in ("data", "tensor"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise PlanError(f"{name} parallelism must be a positive integer, got {v!r}")
        if self.sequence_parallel and self.tensor == 1:
            raise PlanError("sequence parallelism needs tensor parallelism > 1")

    @property
    def single(self) -> bool:
        return self.data == 1 and self.tensor == 1 and not self.sequence_parallel

    def describe(self) -> str:
        sp = ", sequence-parallel" if self.sequence_parallel else ""
        return f"{self.data} data x {self.tensor} tensor{sp}"


@dataclass(frozen=True)
class UnitSplit:
    """Which share (0..1) of one unit kind's costs tensor parallelism divides."""
    fwd: float                 # of its forward seconds
    bwd: float                 # of its backward seconds (and of I and W)
    recompute: float           # of its full-recompute seconds
    ops: frozenset[str]        # its named ops TP splits (time and kept bytes)
    input: float = 0.0         # of its input bytes SP divides (the hidden state, not token ids)


def tp_share(split: bool, tensor: int, sequence_parallel: bool) -> float:
    """The part of one op a device of the tensor group does."""
    return 1.0 / tensor if (split or sequence_parallel) else 1.0


def sharded_kinds(cfg: ModelConfig) -> frozenset[str]:
    """The unit kinds whose parameters the family's registration shards under TP."""
    return frozenset(kind for kind, rules in get_family(cfg.family).tensor_layout if rules)


def collective_time(nbytes: float, group: int, bandwidth: float, latency: float,
                    kind: str = "all_reduce") -> float:
    """Ring collective over `group` ranks moving a buffer of `nbytes` (bus bandwidth)."""
    if group <= 1 or nbytes <= 0:
        return 0.0
    factor = 2.0 * (group - 1) / group if kind == "all_reduce" else (group - 1) / group
    return factor * nbytes / bandwidth + latency


@dataclass(frozen=True)
class Collectives:
    """Seconds of a unit's TP collectives (modelled, never calibrated)."""
    fwd: float = 0.0
    bwd: float = 0.0
    regather: float = 0.0            # SP: all-gather of the input to recompute column-parallel GEMMs
    regather_op: str | None = None   # the first column-parallel GEMM, which pays it


def tp_collectives(kind: str, cfg: ModelConfig, tokens: float, layout: MeshLayout,
                   hw: Hardware) -> Collectives:
    """The TP collectives of one unit on `tokens` tokens per device (module docstring)."""
    tp, sp = layout.tensor, layout.sequence_parallel
    if tp <= 1 or kind not in sharded_kinds(cfg):
        return Collectives()
    act = tokens * cfg.hidden * cfg.compute_bytes
    bw, lat = hw.nvlink_bandwidth, hw.collective_latency
    if kind == "embed":   # a family that shards its embedding: vocab-parallel lookup, rows summed
        return Collectives(collective_time(act, tp, bw, lat, "reduce_scatter" if sp else "all_reduce"))
    if not sp:
        one = collective_time(act, tp, bw, lat)
        if kind == "head":    # the loss's max and sum per token; the input gradient's partial sums
            return Collectives(collective_time(2 * tokens * 4, tp, bw, lat), one)
        return Collectives(one, one)
    if kind == "head":        # SP gathers the sequence before the vocab-parallel projection
        gather = collective_time(act, tp, bw, lat, "all_gather")
        return Collectives(gather + collective_time(2 * tokens * 4, tp, bw, lat), gather)
    one = (collective_time(act, tp, bw, lat, "reduce_scatter")
           + collective_time(act, tp, bw, lat, "all_gather"))
    return Collectives(one, one, collective_time(act, tp, bw, lat, "all_gather"),
                       FIRST_COLUMN_PARALLEL.get((cfg.family, kind)))


def with_collectives(unit: UnitProfile, comm: Collectives) -> UnitProfile:
    """A unit's compute costs plus its TP collectives: forward and backward (the
    backward's in I, where the input gradient is), SP's regather in the recompute of
    its first column-parallel GEMM."""
    if comm == Collectives():
        return unit
    ops = tuple((n, OpProfile(o.fwd_time + comm.regather, o.act_bytes) if n == comm.regather_op else o)
                for n, o in unit.ops)
    full = unit.full_recompute + (comm.regather if comm.regather_op else 0.0)
    i = None if unit.input_grad_time is None else unit.input_grad_time + comm.bwd
    return replace(unit, fwd_time=unit.fwd_time + comm.fwd, bwd_time=unit.bwd_time + comm.bwd, ops=ops,
                   full_recompute_time=full, input_grad_time=i)


def divide_unit(unit: UnitProfile, split: UnitSplit, layout: MeshLayout) -> UnitProfile:
    """One device's share of a unit's compute costs per micro-batch (no collectives,
    weights untouched: `device_weight_bytes`); the unit itself on one device."""
    if layout.single:
        return unit
    t, d, sp = layout.tensor, layout.data, layout.sequence_parallel

    def share(s: float) -> float:   # of a time whose share s TP splits, per device
        return (1.0 / t if sp else (1.0 - s) + s / t) / d

    ops = tuple((n, OpProfile(o.fwd_time * tp_share(n in split.ops, t, sp) / d,
                              o.act_bytes * tp_share(n in split.ops, t, sp) / d)) for n, o in unit.ops)
    inp = (1.0 - split.input) + split.input / t if sp else 1.0
    scaled = {k: getattr(unit, k) * share(s) for k, s in (("input_grad_time", split.bwd),
                                                         ("weight_grad_time", split.bwd))
              if getattr(unit, k) is not None}
    for key in ("weight_grad_bytes", "weight_grad_made_bytes", "weight_grad_beside_bytes",
                "weight_grad_rederive_bytes"):
        if getattr(unit, key) is not None:
            scaled[key] = getattr(unit, key) / d
    return replace(unit, fwd_time=unit.fwd_time * share(split.fwd), bwd_time=unit.bwd_time * share(split.bwd),
                   input_bytes=unit.input_bytes * inp / d, ops=ops,
                   full_recompute_time=unit.full_recompute * share(split.recompute), **scaled)


@lru_cache(maxsize=None)
def replicated_unit_params(cfg: ModelConfig, kind: str) -> int:
    """Parameters of one unit that every device of a tensor group holds whole, by the
    family's registration (models.tensor_parallel): norms, row-layer biases, GPT's
    positions, and the embedding (neither built-in family shards it)."""
    import jax  # lazy: only a stage mesh's planning shards parameters; plain planning starts no JAX
    from jax.sharding import PartitionSpec

    unit = kind if kind in ("embed", "head") else f"{kind}_0"
    tree = {unit: abstract_unit_params(cfg, kind)}
    specs = jax.tree.leaves(tensor_specs(cfg, tree, 2), is_leaf=lambda x: isinstance(x, PartitionSpec))
    return sum(math.prod(leaf.shape) for leaf, spec in zip(jax.tree.leaves(tree), specs)
               if TENSOR_AXIS not in tuple(spec))


def device_weight_bytes(unit: UnitProfile, params: int, params_on_device: float, param_bytes: float,
                        moments_on_device: float) -> float:
    """A unit's training state on one device, from its profiled `weight_bytes` over
    `params` parameters of `param_bytes` each: the parameters and their gradient
    accumulator follow `params_on_device`, the optimizer's per-parameter state (Adam's
    moments) `moments_on_device` parameters' worth, and what is left over (Adam's step
    count) is held whole."""
    if params <= 0:
        return unit.weight_bytes
    per_param = float(int(unit.weight_bytes / params))
    moments = max(0.0, per_param - 2 * param_bytes)
    return (2 * param_bytes * params_on_device + moments * moments_on_device
            + (unit.weight_bytes - per_param * params))


def mesh_profile(profile: Profile, layout: MeshLayout, splits: dict[str, UnitSplit],
                 comms: dict[str, Collectives], weights: dict[str, float]) -> Profile:
    """One device's Profile of a stage mesh: every unit divided (`divide_unit`) with
    its TP collectives (`comms`, none where absent) and its per-device `weights`;
    `micro_batch` becomes the rows a device runs (b/D). The profile itself when the
    layout is one device."""
    if layout.single:
        return profile
    if profile.micro_batch % layout.data:
        raise PlanError(f"micro-batch {profile.micro_batch} is not divisible by data parallelism "
                        f"{layout.data} (each micro-batch splits over the data axis)")
    units = tuple((k, replace(with_collectives(divide_unit(profile.unit(k), splits[k], layout),
                                               comms.get(k, Collectives())),
                              weight_bytes=weights[k])) for k in UNIT_KINDS)
    layer = profile.layer_recompute_time
    if layer is not None:
        a, m = profile.unit("attn").full_recompute, profile.unit("mlp").full_recompute
        s = (splits["attn"].recompute * a + splits["mlp"].recompute * m) / (a + m) if a + m > 0 else 0.0
        layer = layer * ((1.0 / layout.tensor) if layout.sequence_parallel
                         else (1.0 - s) + s / layout.tensor) / layout.data
    return replace(profile, micro_batch=profile.micro_batch // layout.data, units=units,
                   layer_recompute_time=layer)


def data_parallel_seconds(params_on_device: float, grad_bytes: float, param_bytes: float,
                          layout: MeshLayout, hw: Hardware, zero1: bool) -> tuple[float, float]:
    """(gradient collective, parameter all-gather) seconds of one stage over its D
    data ranks, which span T x D consecutive devices (hw.collective_bandwidth):
    an all-reduce of the gradients, or with ZeRO-1 a reduce-scatter and the updated
    parameters' all-gather."""
    d = layout.data
    bw, lat = hw.collective_bandwidth(layout.tensor * d), hw.collective_latency
    if zero1:
        return (collective_time(params_on_device * grad_bytes, d, bw, lat, "reduce_scatter"),
                collective_time(params_on_device * param_bytes, d, bw, lat, "all_gather"))
    return collective_time(params_on_device * grad_bytes, d, bw, lat, "all_reduce"), 0.0


@dataclass(frozen=True)
class StageSync:
    """One stage's once-per-step data-parallel work, in seconds."""
    grads: float                # gradient collective, after the stage's last backward
    gather: float = 0.0         # ZeRO-1's parameter all-gather, before the next first forward
    after: float = 0.0          # what follows on the stage's devices (the optimizer step)


def gradient_sync_end(timeline, syncs: Sequence[StageSync], overlap_backward: bool
                      ) -> tuple[float, float]:
    """(when the last device finishes its stages' data sync, the largest exposed
    collective time) over a simulated `timeline`: the list scheduler
    (schedules.scheduling.list_schedule) over one data-sync lane per device.

    A stage's gradient collective starts when its last backward (B, or W after a split
    one) has run; `overlap_backward` hides it under that backward as far as it lasts
    (Megatron's bucketed --overlap-grad-reduce, the sweep's model) instead (the
    runtime: the sum over the data axis is in the optimizer update, after it). The
    gather hides under the stage's first forward. Stages sharing a device (chunks)
    sync one after another, in the order they become ready. Exact when nothing is
    exposed; otherwise pessimistic: it overlaps one op only."""
    worst = 0.0
    by_device: dict[int, list] = {}
    for s, sync in enumerate(syncs):
        ops = timeline.stage_ops(s)
        last = max((o for o in ops if o.kind.value in ("B", "W")), key=lambda o: o.end)
        first = min((o for o in ops if o.kind.value == "F"), key=lambda o: o.start)
        hidden = last.end - last.start if overlap_backward else 0.0
        exposed = max(0.0, sync.grads - hidden) + max(0.0, sync.gather - (first.end - first.start))
        by_device.setdefault(timeline.device_of(s), []).append((last.end, exposed + sync.after))
        worst = max(worst, exposed)
    rows = [sorted(work) for work in by_device.values()]   # a device syncs its stages as they become ready
    jobs = [job for row in rows for job in row]
    done = list_schedule(lane_run(rows, "data_sync", [seconds for _, seconds in jobs]),
                         release=[ready for ready, _ in jobs])
    return max((done.end[o[-1]] for o in done.order if o), default=0.0), worst
