"""Iteration time of a layout: the project's pipeline simulator (the judge) over the
planner's StageCosts, then data-parallel gradient traffic and the optimizer step,
which are added after it, on a lane per device.

Pipeline: `schedules.simulate(schedules.generate("1f1b", PP, m, adjusted="all" if
the policy recomputes else None, recompute=(policy,)), costs)` where `costs` is
planner.costs.stage_costs over the layout's profile (unit_costs.layout_profile:
forward / backward / recompute seconds with TP collectives, kept bytes) and the
boundary activation sent between stages. Placement is Megatron's rank order (TP
fastest, then DP, then PP), so a stage's DP group spans TP*DP consecutive ranks and
stage s talks to s+1 across TP*DP ranks: inside a node that is NVLink, otherwise the
inter-node network.

Data parallelism, after the pipeline drains on each stage (one job per stage on
its device's data-sync lane, not a simulation of every bucket):
  - gradients are reduce-scattered (ZeRO-1) or all-reduced, overlapped with the
    stage's last backward (bucketed, as Megatron's --overlap-grad-reduce): only the
    part longer than that backward is exposed;
  - with ZeRO-1 the updated parameters are all-gathered, overlapped with the next
    iteration's first forward (--overlap-param-gather): again only the excess counts;
  - the Adam step streams ~28 bytes per locally updated parameter through HBM
    (StageCosts.optimizer, the simulator's own optimizer term).
The iteration ends when the slowest stage has finished all of that
(planner.layouts.mesh_costs.gradient_sync_end: a data-sync lane per device, which the
planner shares, there without the overlap, as the runtime syncs after the last
backward). Against a simulation of every bucket the lane is exact when the traffic hides (nothing
is exposed) and pessimistic otherwise: it overlaps each collective with one compute
op only (tests/planner/layouts/test_timing.py holds it to those bounds).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import schedules
from models.config import ModelConfig
from models.units import even_partition
from planner.costs import stage_costs
from planner.layouts.hardware import Hardware
from planner.layouts.memory import TrainingState, params_per_gpu
from planner.layouts.space import Layout
from planner.layouts.mesh_costs import MeshLayout, StageSync, data_parallel_seconds, gradient_sync_end
from planner.profile import Profile
from schedules import StageCosts, Timeline

ADAM_BYTES_PER_PARAM = 28.0   # read grad, master/param, m, v; write master/param, m, v


@dataclass(frozen=True)
class IterationTime:
    pipeline: float             # simulated makespan
    dp_exposed: float           # gradient / parameter collectives not hidden (worst stage)
    optimizer: float
    total: float
    bubble_fraction: float      # stage 0 idle share of the makespan
    recompute: float            # seconds of recompute on stage 0


@lru_cache(maxsize=256)
def _schedule(pp: int, m: int, policy: str):
    adjusted = None if policy == "none" else "all"
    return schedules.generate("1f1b", pp, m, adjusted=adjusted, recompute=(policy,))


def _p2p_bandwidth(layout: Layout, stage: int, hw: Hardware) -> float:
    """Slowest link between a rank of `stage` and its peer on stage+1."""
    stride = layout.tp * layout.dp
    g = hw.gpus_per_node
    first = stage * stride
    same_node = all(r // g == (r + stride) // g for r in range(first, first + stride))
    return hw.nvlink_bandwidth if same_node else hw.internode_bandwidth


def pipeline_costs(profile: Profile, cfg: ModelConfig, layout: Layout, recompute: frozenset[str],
                   hw: Hardware) -> StageCosts:
    """StageCosts of the layout's pipeline (one GPU of each stage's TP group), from
    the planner's producer over the even partition. The boundary bytes are the
    activation a stage sends (SP shards it), unscaled by any layer measurement; and
    as StageCosts has one p2p bandwidth (the inter-node one), boundaries inside a
    node carry their bytes scaled by internode/NVLink bandwidth: the same transfer
    time, one field."""
    p = layout.pp
    costs = stage_costs(profile, even_partition(profile.num_units, p), (recompute,) * p,
                        p2p_latency=profile.p2p_latency if p > 1 else 0.0)
    act = profile.seq_len * layout.micro_batch * cfg.hidden * cfg.compute_bytes
    if layout.sp:
        act /= layout.tp
    boundary = tuple(act * hw.internode_bandwidth / _p2p_bandwidth(layout, s, hw) if s < p - 1
                     else 0.0 for s in range(p))
    return costs.with_(boundary_bytes=boundary)


def simulate_pipeline(layout: Layout, costs: StageCosts) -> Timeline:
    return schedules.simulate(_schedule(layout.pp, layout.num_microbatches, layout.policy), costs)


def dp_times(kinds: list[str], cfg: ModelConfig, layout: Layout, state: TrainingState,
             hw: Hardware) -> tuple[float, float]:
    """(gradient collective, parameter all-gather) seconds of one stage."""
    n = params_per_gpu(kinds, cfg, layout.tp)
    return data_parallel_seconds(n, state.grad_bytes, state.param_bytes, MeshLayout(layout.dp, layout.tp),
                                 hw, state.zero1)


def adam_seconds(kinds: list[str], cfg: ModelConfig, layout: Layout, state: TrainingState, hw: Hardware) -> float:
    """One stage's Adam step: the parameters it updates (a DP shard of them with
    ZeRO-1) streamed through HBM, ADAM_BYTES_PER_PARAM each: its StageCosts.optimizer."""
    n = params_per_gpu(kinds, cfg, layout.tp)
    updated = n / layout.dp if state.zero1 else n
    return updated * ADAM_BYTES_PER_PARAM / hw.device.hbm_bandwidth


def iteration_time(costs: StageCosts, stages: list[list[str]], layout: Layout, cfg: ModelConfig,
                   state: TrainingState, hw: Hardware) -> tuple[IterationTime, Timeline]:
    """(IterationTime, the simulated Timeline) of the pipeline `costs` describes; the
    Adam step is StageCosts.optimizer (set here from adam_seconds), after each
    stage's last backward and its exposed gradient traffic."""
    costs = costs.with_(optimizer=tuple(adam_seconds(kinds, cfg, layout, state, hw) for kinds in stages))
    timeline = simulate_pipeline(layout, costs)
    syncs = [StageSync(*dp_times(kinds, cfg, layout, state, hw), after=costs.optimizer_time(s))
             for s, kinds in enumerate(stages)]
    end, worst_exposed = gradient_sync_end(timeline, syncs, overlap_backward=True)
    st0 = timeline.stages[0]
    bubble = 1.0 - st0.compute / timeline.makespan if timeline.makespan > 0 else 0.0
    return IterationTime(pipeline=timeline.makespan, dp_exposed=worst_exposed,
                         optimizer=max(s.after for s in syncs), total=end, bubble_fraction=bubble,
                         recompute=st0.recompute), timeline
