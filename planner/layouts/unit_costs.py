"""Per-unit costs of one micro-batch on one GPU of a tensor-parallel group: forward,
backward and recompute seconds (TP collectives included), activation bytes kept
under a recompute policy, and the transient working set of the unit's backward.

The analytic path turns op_work's kernels into seconds with the Hardware rates;
measured layer costs (measured.py) replace the single-GPU seconds and bytes of the
attention+MLP layer, and this module's TP scaling is applied on top of them.

Tensor parallelism (Megatron): column/row-parallel GEMMs, head-parallel attention
and the element-wise ops between them divide by t; norms and residual adds are
replicated on every rank unless sequence parallelism (SP) shards them. Per attention
or MLP unit the forward does one all-reduce of the [tokens, hidden] activation
(SP: a reduce-scatter + an all-gather, same volume) and the backward one more; under
SP a policy that recomputes the unit's column-parallel GEMMs needs one more
all-gather of the unit's normalised input. TP collectives are not overlapped.
"""
from __future__ import annotations

from dataclasses import dataclass

from planner.layouts.hardware import Hardware
from planner.layouts.model_shape import ModelShape
from planner.layouts.op_work import FLASH, MATMUL, MEMORY, OpWork, edge_ops, layer_ops

UNIT_KINDS = ("embed", "attn", "mlp", "head")
COLUMN_PARALLEL = {"attn": ("q", "k", "v", "qkv"), "mlp": ("mlp_gate", "mlp_up")}


@dataclass(frozen=True)
class UnitCost:
    kind: str
    fwd: float                  # seconds, TP collectives included
    bwd: float                  # seconds without recompute
    recompute: float            # seconds the policy adds to the backward
    kept_bytes: float           # activation bytes kept per micro-batch under the policy
    kept_bytes_none: float      # ... with nothing recomputed
    transient_bytes: float      # extra working set while this unit runs its backward
    comm_fwd: float = 0.0       # the parts of fwd, bwd and recompute spent in TP collectives
    comm_bwd: float = 0.0
    comm_recompute: float = 0.0

    @property
    def tp_comm(self) -> float:
        return self.comm_fwd + self.comm_bwd + self.comm_recompute


def recompute_set(policy: str, family: str) -> frozenset[str]:
    """Op names a recompute preset redoes; `full` is every op."""
    from models.ops import ops_for, preset_ops
    if policy == "full":
        return frozenset(ops_for(family)) | {"loss"}
    return preset_ops(policy, family)


def kernel_time(kernels, hw: Hardware) -> float:
    rate = {MATMUL: hw.matmul_flops, FLASH: hw.flash_attention_flops}
    total = 0.0
    for k in kernels:
        t_mem = k.bytes / hw.hbm_bandwidth
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


def unit_ops(shape: ModelShape, seq_len: int, micro_batch: int, attention: str) -> dict:
    ops = layer_ops(shape.family, hidden=shape.hidden, num_heads=shape.num_heads,
                    num_kv_heads=shape.num_kv_heads, ffn_hidden=shape.ffn_hidden,
                    seq_len=seq_len, micro_batch=micro_batch, attention=attention,
                    compute_bytes=shape.compute_bytes)
    ops += edge_ops(hidden=shape.hidden, vocab_size=shape.vocab_size, seq_len=seq_len,
                    micro_batch=micro_batch, compute_bytes=shape.compute_bytes)
    return {kind: tuple(o for o in ops if o.unit == kind) for kind in UNIT_KINDS}


def _tp_comm(kind: str, shape: ModelShape, tokens: float, tp: int, sp: bool, recomputes_gemms: bool,
             hw: Hardware) -> tuple[float, float, float]:
    """(fwd, bwd, recompute) seconds of TP collectives for one unit."""
    if tp <= 1:
        return 0.0, 0.0, 0.0
    act = tokens * shape.hidden * shape.compute_bytes
    bw, lat = hw.nvlink_bandwidth, hw.collective_latency
    if kind in ("attn", "mlp"):
        if sp:
            one = (collective_time(act, tp, bw, lat, "reduce_scatter")
                   + collective_time(act, tp, bw, lat, "all_gather"))
            re = collective_time(act, tp, bw, lat, "all_gather") if recomputes_gemms else 0.0
        else:
            one, re = collective_time(act, tp, bw, lat), 0.0
        return one, one, re
    if kind == "embed":   # vocab-parallel lookup: partial rows summed across ranks
        kind_sp = "reduce_scatter" if sp else "all_reduce"
        return collective_time(act, tp, bw, lat, kind_sp), 0.0, 0.0
    # head: SP gathers the sequence before the vocab-parallel projection; the
    # cross-entropy all-reduces a max and a sum per token.
    stats = collective_time(2 * tokens * 4, tp, bw, lat)
    gather = collective_time(act, tp, bw, lat, "all_gather") if sp else 0.0
    return gather + stats, gather, 0.0


def _input_bytes(kind: str, shape: ModelShape, tokens: float, tp: int, sp: bool) -> float:
    """Bytes of a unit's inputs, kept under every policy: int32 token ids for embed,
    the hidden state (sharded by SP) otherwise, plus the head's int32 targets."""
    if kind == "embed":
        return tokens * 4
    hidden = tokens * shape.hidden * shape.compute_bytes * (1.0 / tp if sp else 1.0)
    return hidden + (tokens * 4 if kind == "head" else 0.0)


def analytic_unit_cost(kind: str, shape: ModelShape, seq_len: int, micro_batch: int,
                       attention: str, policy: str, tp: int, sp: bool, hw: Hardware,
                       ops: dict | None = None) -> UnitCost:
    ops = unit_ops(shape, seq_len, micro_batch, attention) if ops is None else ops
    unit = ops[kind]
    redo = recompute_set(policy, shape.family)
    c = shape.compute_bytes
    tokens = float(seq_len * micro_batch)
    fwd = sum(kernel_time(o.fwd, hw) * _share(o, tp, sp) for o in unit)
    bwd = sum(kernel_time(o.bwd, hw) * _share(o, tp, sp) for o in unit)
    recompute = sum(kernel_time(o.fwd, hw) * _share(o, tp, sp)
                    for o in unit if o.name in redo and o.recomputed_in_backward)
    input_kept = _input_bytes(kind, shape, tokens, tp, sp)
    kept_none = input_kept + sum(o.kept_elems * c * _share(o, tp, sp) for o in unit)
    kept = input_kept + sum(o.kept_elems * c * _share(o, tp, sp) for o in unit if o.name not in redo)
    recomputes_gemms = any(n in redo for n in COLUMN_PARALLEL.get(kind, ()))
    cf, cb, cr = _tp_comm(kind, shape, tokens, tp, sp, recomputes_gemms, hw)
    return UnitCost(kind=kind, fwd=fwd + cf, bwd=bwd + cb, recompute=recompute + cr,
                    kept_bytes=kept, kept_bytes_none=kept_none,
                    transient_bytes=_transient(kind, unit, redo, shape, tokens, micro_batch,
                                               seq_len, attention, tp, sp),
                    comm_fwd=cf, comm_bwd=cb, comm_recompute=cr)


def _transient(kind: str, unit: tuple[OpWork, ...], redo: frozenset[str], shape: ModelShape,
               tokens: float, micro_batch: int, seq_len: int, attention: str, tp: int,
               sp: bool) -> float:
    """Working set of the unit's backward beyond the kept activations: the incoming
    and outgoing activation gradients, the widest intermediate gradient, whatever the
    policy re-materialises, and XLA attention's probability, dP and float32 dS
    matrices (B x heads x T^2) or the head's float32 logits and their gradient."""
    c = shape.compute_bytes
    act = tokens * shape.hidden * c * (1.0 / tp if sp else 1.0)
    widest = max((o.kept_elems * c * _share(o, tp, sp) for o in unit), default=0.0)
    rematerialised = sum(o.kept_elems * c * _share(o, tp, sp) for o in unit if o.name in redo)
    extra = 0.0
    if kind == "attn" and attention == "xla":
        extra = (4 + 2 * c) * micro_batch * (shape.num_heads / tp) * float(seq_len) ** 2
    if kind == "head":
        extra = 2 * 4 * tokens * shape.vocab_size / tp
    return 2 * act + widest + rematerialised + extra


def analytic_unit_costs(shape: ModelShape, seq_len: int, micro_batch: int, attention: str,
                        policy: str, tp: int, sp: bool, hw: Hardware) -> dict[str, UnitCost]:
    ops = unit_ops(shape, seq_len, micro_batch, attention)
    return {k: analytic_unit_cost(k, shape, seq_len, micro_batch, attention, policy, tp, sp, hw, ops)
            for k in UNIT_KINDS}
