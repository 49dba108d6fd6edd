"""Memory per GPU of a layout, stage by stage.

    weights      params + grads, sharded over TP (replicated norms and biases stay
                 whole) and PP (the stage's units); optimizer state sharded over TP,
                 PP and, with ZeRO-1, DP
    activations  1F1B keeps min(PP - s, m) micro-batches in flight on stage s (the
                 one memory fold over its order, schedules.memory), each
                 holding the kept bytes of the stage's units under the policy (TP
                 divides the parts it splits; SP divides the rest)
    transient    the largest working set of one unit's backward (activation grads,
                 re-materialised ops, XLA attention's score matrices, the head's
                 float32 logits)
A layout fits when the worst stage's sum is within the GPU memory minus the reserve.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from models.config import ModelConfig
from models.units import even_partition, unit_param_count
from planner.errors import PlanError
from planner.layouts.mesh_costs import replicated_unit_params
from planner.profile import unit_kinds
from schedules.costs import StageCosts
from schedules.generators import generate
from schedules.memory import BLOCKS, order_memory

# Bytes per parameter: (params, grads, optimizer state).
STATE_PRESETS = {
    # Megatron-style mixed precision (the layouts paper): bf16 weights and grads on
    # every rank, fp32 master weights + Adam m and v in the (ZeRO-1-shardable) optimizer.
    "bf16": (2.0, 2.0, 12.0),
    # This project's models as built (param_dtype float32, bf16 compute): fp32
    # weights and grads, Adam m and v in fp32.
    "fp32": (4.0, 4.0, 8.0),
}


@dataclass(frozen=True)
class TrainingState:
    name: str = "bf16"
    zero1: bool = True

    def __post_init__(self) -> None:
        if self.name not in STATE_PRESETS:
            raise PlanError(f"unknown training state {self.name!r}; valid: {', '.join(STATE_PRESETS)}")

    @property
    def param_bytes(self) -> float:
        return STATE_PRESETS[self.name][0]

    @property
    def grad_bytes(self) -> float:
        return STATE_PRESETS[self.name][1]

    @property
    def optimizer_bytes(self) -> float:
        return STATE_PRESETS[self.name][2]

    def describe(self) -> str:
        p, g, o = STATE_PRESETS[self.name]
        shard = "ZeRO-1 over DP" if self.zero1 else "replicated over DP"
        return f"{self.name} state: {p:g}+{g:g} B/param (params+grads), optimizer {o:g} B/param {shard}"


def replicated_params(kind: str, cfg: ModelConfig) -> int:
    """Parameters TP does not split, as the family's registration says
    (planner.layouts.mesh_costs.replicated_unit_params): norm scales (and GPT's norm
    biases and the row-parallel output biases), the embedding table and GPT's learned
    position table (neither built-in family shards its embedding)."""
    return replicated_unit_params(cfg, kind)


def params_per_gpu(kinds: list[str], cfg: ModelConfig, tp: int) -> float:
    total = 0.0
    for k in kinds:
        rep = replicated_params(k, cfg)
        total += rep + (unit_param_count(cfg, k) - rep) / tp
    return total


def stage_kinds(cfg: ModelConfig, pp: int) -> list[list[str]]:
    """Unit kinds of each stage under the project's even partition (embed on the first
    stage, head on the last)."""
    kinds = list(unit_kinds(cfg.num_layers))
    return [kinds[a:b] for a, b in even_partition(cfg.num_units, pp)]


@dataclass(frozen=True)
class StageMemory:
    weights: float
    kept_per_microbatch: float
    inflight: int
    transient: float

    @property
    def activations(self) -> float:
        return self.kept_per_microbatch * self.inflight

    @property
    def total(self) -> float:
        return self.weights + self.activations + self.transient


def sharded_weight_bytes(kinds: list[str], cfg: ModelConfig, tp: int, dp: int,
                         state: TrainingState) -> float:
    """Params + grads + optimizer state of `kinds` on one GPU: TP splits what it can,
    ZeRO-1 also shards the optimizer state over DP."""
    n = params_per_gpu(kinds, cfg, tp)
    opt_shards = dp if state.zero1 else 1
    return n * (state.param_bytes + state.grad_bytes) + n * state.optimizer_bytes / opt_shards


@lru_cache(maxsize=256)
def inflight_1f1b(num_stages: int, num_microbatches: int) -> tuple[int, ...]:
    """Blocks each stage of a 1F1B pipeline holds at most: the one memory fold
    counted over the 1F1B order (schedules.memory.order_memory), min(p - s, m)."""
    rows = generate("1f1b", num_stages, num_microbatches).rows
    return tuple(order_memory(row, BLOCKS).peak_inflight_microbatches for row in rows)


def stage_memory(costs: StageCosts, stages: list[list[str]], transient: dict[str, float],
                 num_microbatches: int) -> list[StageMemory]:
    """Per stage of a 1F1B pipeline: weights and kept bytes from its StageCosts (the
    policy's recompute set on every stage), the blocks in flight, the largest unit
    backward's transient."""
    inflight = inflight_1f1b(len(stages), num_microbatches)
    return [StageMemory(weights=costs.weight_bytes[s], kept_per_microbatch=costs.act_bytes_recompute[s],
                        inflight=inflight[s], transient=max(transient[k] for k in kinds))
            for s, kinds in enumerate(stages)]
