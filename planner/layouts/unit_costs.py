"""Per-unit costs of one micro-batch on one GPU of a tensor-parallel group, in the
planner's own profile format (planner.profile.UnitProfile), so the sweep's stages
go through the planner's one StageCosts producer (planner.costs.stage_costs).

A unit's UnitProfile, as the sweep fills it:
  fwd_time, bwd_time    kernel seconds (op_work's kernels at the device's rates, each
                        max(FLOPs / rate, bytes / HBM)) plus the unit's TP collectives
  ops                   per named op: its recompute seconds (0 for the ops a backward
                        never recomputes: attn_proj, attn_res, mlp_down, mlp_res, embed)
                        and the bytes it keeps per micro-batch
  full_recompute_time   every recomputable op, plus SP's input all-gather
  input_bytes           kept under every policy
  weight_bytes          per layout (it depends on DP and the training state): memory.py
Measured layer costs (measured.py) rescale the compute part; the TP collectives are
modelled and never rescaled, so a UnitModel keeps the two apart.

How tensor (and sequence) parallelism divides these costs is planner.layouts.
mesh_costs, which the planner shares: the units are built on one GPU, then divided
for the layout's TP / SP (`divide_unit`, with `unit_splits`: the share of each
unit's time in ops TP splits, from the same op list) and given its TP collectives.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from models.config import ModelConfig
from models.registry import preset_ops
from planner.device import DeviceSpec
from planner.layouts.hardware import Hardware
from planner.layouts.mesh_costs import (Collectives, MeshLayout, UnitSplit, divide_unit, sharded_kinds,
                                        tp_collectives, tp_share, with_collectives)
from planner.layouts.op_work import FLASH, MATMUL, MEMORY, OpWork, edge_ops, layer_ops
from planner.profile import FULL, UNIT_KINDS, OpProfile, Profile, UnitProfile


@dataclass(frozen=True)
class UnitModel:
    """One unit kind under one layout's (micro-batch, attention, policy, TP, SP)."""
    compute: UnitProfile         # kernels only: times without collectives, kept bytes
    comm: Collectives
    transient_bytes: float       # working set of its backward beyond the kept activations

    def profile(self, weight_bytes: float = 0.0) -> UnitProfile:
        """Compute plus collectives, with the layout's weight bytes."""
        return replace(with_collectives(self.compute, self.comm), weight_bytes=weight_bytes)

    def scaled(self, fwd: float = 1.0, bwd: float = 1.0, recompute: float = 1.0,
               kept: float = 1.0) -> "UnitModel":
        """The compute part scaled field by field (collectives and transient unchanged)."""
        c = self.compute
        ops = tuple((n, OpProfile(o.fwd_time * recompute, o.act_bytes * kept)) for n, o in c.ops)
        return replace(self, compute=replace(
            c, fwd_time=c.fwd_time * fwd, bwd_time=c.bwd_time * bwd, input_bytes=c.input_bytes * kept,
            ops=ops, full_recompute_time=c.full_recompute * recompute))


def recompute_ops(policy: str, family: str) -> frozenset[str]:
    """A recompute preset as the planner's recompute set ({"full"} for `full`)."""
    return frozenset({FULL}) if policy == "full" else preset_ops(policy, family)


def kernel_time(kernels, device: DeviceSpec) -> float:
    rate = {MATMUL: device.matmul_flops, FLASH: device.flash_attention_flops}
    total = 0.0
    for k in kernels:
        t_mem = k.bytes / device.hbm_bandwidth
        t_flop = 0.0 if k.rate == MEMORY else k.flops / rate[k.rate]
        total += max(t_mem, t_flop)
    return total


def _split(op: OpWork, cfg: ModelConfig) -> bool:
    """Whether TP splits the op here: Megatron splits it (op_work) and the family's
    registration shards its unit kind (neither built-in family shards the embedding)."""
    return op.tp_split and op.unit in sharded_kinds(cfg)


def unit_ops(cfg: ModelConfig, seq_len: int, micro_batch: int, attention: str) -> dict:
    ops = layer_ops(cfg.family, hidden=cfg.hidden, num_heads=cfg.num_heads,
                    num_kv_heads=cfg.num_kv_heads, ffn_hidden=cfg.ffn_hidden,
                    seq_len=seq_len, micro_batch=micro_batch, attention=attention,
                    compute_bytes=cfg.compute_bytes)
    ops += edge_ops(hidden=cfg.hidden, vocab_size=cfg.vocab_size, seq_len=seq_len,
                    micro_batch=micro_batch, compute_bytes=cfg.compute_bytes)
    return {kind: tuple(o for o in ops if o.unit == kind) for kind in UNIT_KINDS}


def _input_bytes(kind: str, cfg: ModelConfig, tokens: float) -> tuple[float, float]:
    """(bytes of a unit's inputs, kept under every policy; the share of them that is
    the hidden state, which SP shards): int32 token ids for embed, the hidden state
    otherwise, plus the head's int32 targets."""
    if kind == "embed":
        return tokens * 4, 0.0
    hidden = tokens * cfg.hidden * cfg.compute_bytes
    ids = tokens * 4 if kind == "head" else 0.0
    return hidden + ids, hidden / (hidden + ids)


def _shares(unit: tuple[OpWork, ...], cfg: ModelConfig, device: DeviceSpec) -> tuple[float, float, float]:
    """The share of a unit's forward, backward and full-recompute seconds in ops TP splits."""
    def share(times: dict[str, float]) -> float:
        total = sum(times.values())
        return sum(t for n, t in times.items() if n in split) / total if total > 0 else 0.0
    split = {o.name for o in unit if _split(o, cfg)}
    fwd = {o.name: kernel_time(o.fwd, device) for o in unit}
    return (share(fwd), share({o.name: kernel_time(o.bwd, device) for o in unit}),
            share({o.name: fwd[o.name] for o in unit if o.recomputed_in_backward}))


def unit_splits(cfg: ModelConfig, seq_len: int, micro_batch: int, attention: str,
                device: DeviceSpec) -> dict[str, UnitSplit]:
    """Per unit kind, what tensor parallelism divides (planner.layouts.mesh_costs):
    the share of its seconds in split ops by this roofline at the shape, its split
    named ops, the share of its input that is the hidden state."""
    out = {}
    for kind, unit in unit_ops(cfg, seq_len, micro_batch, attention).items():
        fwd, bwd, rec = _shares(unit, cfg, device)
        out[kind] = UnitSplit(fwd, bwd, rec, frozenset(o.name for o in unit if _split(o, cfg) and o.name != "loss"),
                              _input_bytes(kind, cfg, float(seq_len * micro_batch))[1])
    return out


def _compute_profile(kind: str, unit: tuple[OpWork, ...], cfg: ModelConfig, tokens: float,
                     device: DeviceSpec) -> UnitProfile:
    """The unit on one GPU, kernels only."""
    c = cfg.compute_bytes
    times = {o.name: kernel_time(o.fwd, device) for o in unit}
    ops = tuple((o.name, OpProfile(times[o.name] if o.recomputed_in_backward else 0.0, o.kept_elems * c))
                for o in unit if o.name != "loss")   # "loss" is the head's logsumexp, not a named op
    return UnitProfile(
        fwd_time=sum(times.values()), bwd_time=sum(kernel_time(o.bwd, device) for o in unit),
        weight_bytes=0.0, input_bytes=_input_bytes(kind, cfg, tokens)[0], ops=ops,
        full_recompute_time=sum(times[o.name] for o in unit if o.recomputed_in_backward))


def _transient(kind: str, unit: tuple[OpWork, ...], redo: frozenset[str], cfg: ModelConfig,
               tokens: float, micro_batch: int, seq_len: int, attention: str, tp: int,
               sp: bool) -> float:
    """Working set of the unit's backward beyond the kept activations: the incoming
    and outgoing activation gradients, the widest intermediate gradient, whatever the
    policy re-materialises, and XLA attention's probability, dP and float32 dS
    matrices (B x heads x T^2) or the head's float32 logits and their gradient."""
    c = cfg.compute_bytes
    act = tokens * cfg.hidden * c * tp_share(False, tp, sp)
    kept = [o.kept_elems * c * tp_share(_split(o, cfg), tp, sp) for o in unit]
    widest = max(kept, default=0.0)
    rematerialised = sum(b for o, b in zip(unit, kept) if FULL in redo or o.name in redo)
    extra = 0.0
    if kind == "attn" and attention == "xla":
        extra = (4 + 2 * c) * micro_batch * cfg.num_heads * tp_share(True, tp, sp) * float(seq_len) ** 2
    if kind == "head":
        extra = 2 * 4 * tokens * cfg.vocab_size * tp_share(kind in sharded_kinds(cfg), tp, sp)
    return 2 * act + widest + rematerialised + extra


def analytic_units(cfg: ModelConfig, seq_len: int, micro_batch: int, attention: str, policy: str,
                   tp: int, sp: bool, hw: Hardware) -> dict[str, UnitModel]:
    """Every unit kind's analytic costs under one layout's choices: built on one GPU,
    divided by the layout's TP / SP as planner.layouts.mesh_costs says."""
    ops = unit_ops(cfg, seq_len, micro_batch, attention)
    redo = recompute_ops(policy, cfg.family)
    tokens = float(seq_len * micro_batch)
    layout = MeshLayout(1, tp, sp)
    splits = unit_splits(cfg, seq_len, micro_batch, attention, hw.device)
    return {kind: UnitModel(divide_unit(_compute_profile(kind, ops[kind], cfg, tokens, hw.device), splits[kind],
                                        layout),
                            tp_collectives(kind, cfg, tokens, layout, hw),
                            _transient(kind, ops[kind], redo, cfg, tokens, micro_batch, seq_len,
                                       attention, tp, sp))
            for kind in UNIT_KINDS}


def layout_profile(cfg: ModelConfig, seq_len: int, micro_batch: int, units: dict[str, UnitModel],
                   weight_bytes: dict[str, float], hw: Hardware, label: str) -> Profile:
    """The Profile of one GPU of a layout's TP group: what planner.costs.stage_costs
    turns into the pipeline's StageCosts. Stages talk over the inter-node network
    (timing.py scales boundaries on faster links)."""
    return Profile(cfg.name, f"sweep:{hw.device.name} {label}", cfg.num_layers, seq_len, micro_batch,
                   hw.device.host_bandwidth, hw.internode_bandwidth, hw.device.p2p_latency,
                   tuple((k, units[k].profile(weight_bytes[k])) for k in UNIT_KINDS), cfg.family)
