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

Tensor parallelism (Megatron): column/row-parallel GEMMs, head-parallel attention
and the element-wise ops between them divide by t; norms and residual adds are
replicated on every rank unless sequence parallelism (SP) shards them. Per attention
or MLP unit the forward does one all-reduce of the [tokens, hidden] activation
(SP: a reduce-scatter + an all-gather, same volume) and the backward one more; under
SP recomputing the unit's column-parallel GEMMs needs one more all-gather of the
unit's normalised input, charged to its first column-parallel GEMM (every recompute
preset that recomputes one recomputes that one). TP collectives are not overlapped.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from models.config import ModelConfig
from models.registry import preset_ops
from planner.device import DeviceSpec
from planner.layouts.hardware import Hardware
from planner.layouts.op_work import FLASH, MATMUL, MEMORY, OpWork, edge_ops, layer_ops
from planner.profile import FULL, UNIT_KINDS, OpProfile, Profile, UnitProfile

# The first column-parallel GEMM of each (family, unit kind): it pays SP's regather.
FIRST_COLUMN_PARALLEL = {("llama", "attn"): "q", ("gpt", "attn"): "qkv",
                         ("llama", "mlp"): "mlp_gate", ("gpt", "mlp"): "mlp_up"}


@dataclass(frozen=True)
class Collectives:
    """Seconds of a unit's TP collectives (modelled, never calibrated)."""
    fwd: float = 0.0
    bwd: float = 0.0
    regather: float = 0.0            # SP: all-gather of the input to recompute column-parallel GEMMs
    regather_op: str | None = None   # the first column-parallel GEMM, which pays it


@dataclass(frozen=True)
class UnitModel:
    """One unit kind under one layout's (micro-batch, attention, policy, TP, SP)."""
    compute: UnitProfile         # kernels only: times without collectives, kept bytes
    comm: Collectives
    transient_bytes: float       # working set of its backward beyond the kept activations

    def profile(self, weight_bytes: float = 0.0) -> UnitProfile:
        """Compute plus collectives, with the layout's weight bytes."""
        c, comm = self.compute, self.comm
        ops = tuple((n, OpProfile(o.fwd_time + comm.regather, o.act_bytes) if n == comm.regather_op else o)
                    for n, o in c.ops)
        full = c.full_recompute + (comm.regather if comm.regather_op else 0.0)
        return replace(c, fwd_time=c.fwd_time + comm.fwd, bwd_time=c.bwd_time + comm.bwd, ops=ops,
                       full_recompute_time=full, weight_bytes=weight_bytes)

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


def _share(op: OpWork, tp: int, sp: bool) -> float:
    return 1.0 / tp if (op.tp_split or sp) else 1.0


def collective_time(nbytes: float, group: int, bandwidth: float, latency: float,
                    kind: str = "all_reduce") -> float:
    """Ring collective over `group` ranks moving a buffer of `nbytes` (bus bandwidth)."""
    if group <= 1 or nbytes <= 0:
        return 0.0
    factor = 2.0 * (group - 1) / group if kind == "all_reduce" else (group - 1) / group
    return factor * nbytes / bandwidth + latency


def unit_ops(cfg: ModelConfig, seq_len: int, micro_batch: int, attention: str) -> dict:
    ops = layer_ops(cfg.family, hidden=cfg.hidden, num_heads=cfg.num_heads,
                    num_kv_heads=cfg.num_kv_heads, ffn_hidden=cfg.ffn_hidden,
                    seq_len=seq_len, micro_batch=micro_batch, attention=attention,
                    compute_bytes=cfg.compute_bytes)
    ops += edge_ops(hidden=cfg.hidden, vocab_size=cfg.vocab_size, seq_len=seq_len,
                    micro_batch=micro_batch, compute_bytes=cfg.compute_bytes)
    return {kind: tuple(o for o in ops if o.unit == kind) for kind in UNIT_KINDS}


def _tp_comm(kind: str, cfg: ModelConfig, tokens: float, tp: int, sp: bool, hw: Hardware) -> Collectives:
    """The TP collectives of one unit."""
    if tp <= 1:
        return Collectives()
    act = tokens * cfg.hidden * cfg.compute_bytes
    bw, lat = hw.nvlink_bandwidth, hw.collective_latency
    if kind in ("attn", "mlp"):
        if not sp:
            one = collective_time(act, tp, bw, lat)
            return Collectives(one, one)
        one = (collective_time(act, tp, bw, lat, "reduce_scatter")
               + collective_time(act, tp, bw, lat, "all_gather"))
        return Collectives(one, one, collective_time(act, tp, bw, lat, "all_gather"),
                           FIRST_COLUMN_PARALLEL[cfg.family, kind])
    if kind == "embed":   # vocab-parallel lookup: partial rows summed across ranks
        return Collectives(collective_time(act, tp, bw, lat, "reduce_scatter" if sp else "all_reduce"))
    # head: SP gathers the sequence before the vocab-parallel projection; the
    # cross-entropy all-reduces a max and a sum per token.
    stats = collective_time(2 * tokens * 4, tp, bw, lat)
    gather = collective_time(act, tp, bw, lat, "all_gather") if sp else 0.0
    return Collectives(gather + stats, gather)


def _input_bytes(kind: str, cfg: ModelConfig, tokens: float, tp: int, sp: bool) -> float:
    """Bytes of a unit's inputs, kept under every policy: int32 token ids for embed,
    the hidden state (sharded by SP) otherwise, plus the head's int32 targets."""
    if kind == "embed":
        return tokens * 4
    hidden = tokens * cfg.hidden * cfg.compute_bytes * (1.0 / tp if sp else 1.0)
    return hidden + (tokens * 4 if kind == "head" else 0.0)


def _compute_profile(kind: str, unit: tuple[OpWork, ...], cfg: ModelConfig, tokens: float, tp: int,
                     sp: bool, device: DeviceSpec) -> UnitProfile:
    c = cfg.compute_bytes
    times = {o.name: kernel_time(o.fwd, device) * _share(o, tp, sp) for o in unit}
    ops = tuple((o.name, OpProfile(times[o.name] if o.recomputed_in_backward else 0.0,
                                   o.kept_elems * c * _share(o, tp, sp)))
                for o in unit if o.name != "loss")   # "loss" is the head's logsumexp, not a named op
    return UnitProfile(
        fwd_time=sum(times[o.name] for o in unit),
        bwd_time=sum(kernel_time(o.bwd, device) * _share(o, tp, sp) for o in unit),
        weight_bytes=0.0, input_bytes=_input_bytes(kind, cfg, tokens, tp, sp), ops=ops,
        full_recompute_time=sum(times[o.name] for o in unit if o.recomputed_in_backward))


def _transient(kind: str, unit: tuple[OpWork, ...], redo: frozenset[str], cfg: ModelConfig,
               tokens: float, micro_batch: int, seq_len: int, attention: str, tp: int,
               sp: bool) -> float:
    """Working set of the unit's backward beyond the kept activations: the incoming
    and outgoing activation gradients, the widest intermediate gradient, whatever the
    policy re-materialises, and XLA attention's probability, dP and float32 dS
    matrices (B x heads x T^2) or the head's float32 logits and their gradient."""
    c = cfg.compute_bytes
    act = tokens * cfg.hidden * c * (1.0 / tp if sp else 1.0)
    widest = max((o.kept_elems * c * _share(o, tp, sp) for o in unit), default=0.0)
    rematerialised = sum(o.kept_elems * c * _share(o, tp, sp) for o in unit
                         if FULL in redo or o.name in redo)
    extra = 0.0
    if kind == "attn" and attention == "xla":
        extra = (4 + 2 * c) * micro_batch * (cfg.num_heads / tp) * float(seq_len) ** 2
    if kind == "head":
        extra = 2 * 4 * tokens * cfg.vocab_size / tp
    return 2 * act + widest + rematerialised + extra


def analytic_units(cfg: ModelConfig, seq_len: int, micro_batch: int, attention: str, policy: str,
                   tp: int, sp: bool, hw: Hardware) -> dict[str, UnitModel]:
    """Every unit kind's analytic costs under one layout's choices."""
    ops = unit_ops(cfg, seq_len, micro_batch, attention)
    redo = recompute_ops(policy, cfg.family)
    tokens = float(seq_len * micro_batch)
    return {kind: UnitModel(_compute_profile(kind, ops[kind], cfg, tokens, tp, sp, hw.device),
                            _tp_comm(kind, cfg, tokens, tp, sp, hw),
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
