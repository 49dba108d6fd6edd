"""A profile derived from model shapes, for when no GPU profile exists.

Bytes are exact: activation and input bytes come from the residuals `jax.vjp`
keeps (models.info traces them on abstract shapes), weight bytes from the
abstract params plus gradients plus the engine optimizer's state (optax adamw,
traced with jax.eval_shape). Times are a roofline estimate at an ASSUMED achieved
throughput, so the profile's "device" says "analytic:<device>":
- matmul ops: 2*M*N*K FLOPs at `matmul_efficiency` of the dense bf16 peak;
- attention core: causal flash attention, 2*B*T^2*D FLOPs (half of 4*B*T^2*D)
  at `attention_efficiency`;
- everything else (norms, RoPE, SiLU/GELU, mul, residual adds, the embedding
  gather, the loss) is memory-bound: bytes read + written at `memory_efficiency`
  of HBM bandwidth.
Backward = 2x forward for matmuls and elementwise ops, 2.5x for flash attention
(its backward recomputes the scores). A unit's fwd_time is the sum of its ops
(the head adds its cross-entropy); "full" recompute costs that fwd_time.
"""
from __future__ import annotations

from dataclasses import dataclass

from planner.profile import OpProfile, Profile, UnitProfile


@dataclass(frozen=True)
class DeviceSpec:
    name: str
    dense_flops: float          # dense bf16 peak, FLOP/s
    hbm_bandwidth: float        # bytes/s
    host_bandwidth: float       # host <-> device, per direction, bytes/s
    p2p_bandwidth: float        # device <-> device, per direction, bytes/s
    p2p_latency: float = 1e-5
    matmul_efficiency: float = 0.6
    attention_efficiency: float = 0.45
    memory_efficiency: float = 0.7


DEVICES = {
    # A100-SXM4-80GB: 312 TFLOP/s bf16, 2.04 TB/s HBM2e; PCIe 4.0 x16 to host (~25 GB/s
    # achieved); NVLink 3, 600 GB/s both directions (the paper's 8x A100 box).
    "A100-80GB": DeviceSpec("A100-80GB", 312e12, 2.039e12, 25e9, 300e9),
    # H200: 989 TFLOP/s bf16 dense, 4.8 TB/s HBM3e; 789 TFLOP/s measured through
    # jax.jit (device-notes.md, hence 0.8), host copies 53 GB/s measured; NVLink 4.
    "H200": DeviceSpec("H200", 989e12, 4.8e12, 53e9, 450e9, matmul_efficiency=0.8,
                       attention_efficiency=0.6),
}

_MATMUL = {"q", "k", "v", "qkv", "attn_proj", "mlp_gate", "mlp_up", "mlp_down", "logits"}


def _op_costs(cfg, op: str, seq_len: int, micro_batch: int) -> tuple[float, float]:
    """(FLOPs if compute-bound else 0, bytes moved if memory-bound else 0), forward."""
    import jax.numpy as jnp
    B, T, D = micro_batch, seq_len, cfg.hidden
    F, V, H = cfg.ffn_hidden, cfg.vocab_size, cfg.head_dim
    N, K = cfg.num_heads, cfg.num_kv_heads
    c = jnp.dtype(cfg.compute_dtype).itemsize
    flops = {"q": 2 * B * T * D * N * H, "k": 2 * B * T * D * K * H, "v": 2 * B * T * D * K * H,
             "qkv": 2 * B * T * D * 3 * D, "attn_proj": 2 * B * T * D * D,
             "mlp_gate": 2 * B * T * D * F, "mlp_up": 2 * B * T * D * F, "mlp_down": 2 * B * T * F * D,
             "logits": 2 * B * T * D * V, "attn_core": 2 * B * T * T * D}
    if op in flops:
        return float(flops[op]), 0.0
    btd, btf = B * T * D * c, B * T * F * c
    moved = {"embed": 2 * btd, "attn_norm": 2 * btd, "mlp_norm": 2 * btd, "final_norm": 2 * btd,
             "q_rope": 2 * B * T * N * H * c, "k_rope": 2 * B * T * K * H * c,
             "attn_res": 3 * btd, "mlp_res": 3 * btd, "mlp_act": 2 * btf, "mlp_mul": 3 * btf}
    return 0.0, float(moved.get(op, 2 * btd))


def optimizer_bytes(params) -> int:
    """Bytes of optax adamw's state for `params` (abstract shapes; nothing allocated)."""
    import math

    import jax
    import optax
    state = jax.eval_shape(optax.adamw(1e-3).init, params)
    return sum(math.prod(x.shape) * x.dtype.itemsize for x in jax.tree.leaves(state))


def weight_bytes(params) -> int:
    """params + grads (same shapes) + optimizer state."""
    import math

    import jax
    p = sum(math.prod(x.shape) * x.dtype.itemsize for x in jax.tree.leaves(params))
    return 2 * p + optimizer_bytes(params)


def analytic_profile(cfg, seq_len: int, micro_batch: int, device: str = "A100-80GB",
                     spec: DeviceSpec | None = None) -> Profile:
    """Profile of `cfg` (a models.ModelConfig) at (seq_len, micro_batch) on `device`
    (a DEVICES key) or on an explicit DeviceSpec."""
    import models
    import models.info as info
    from models.units import abstract_unit_params

    if spec is None:
        if device not in DEVICES:
            raise ValueError(f"unknown device {device!r} for an analytic profile (known: {', '.join(DEVICES)})")
        spec = DEVICES[device]
    traced = cfg.replace(attention_impl="xla")  # same named residuals; traceable on any host
    act = info.op_act_bytes(traced, seq_len, micro_batch)
    mm = spec.dense_flops * spec.matmul_efficiency
    attn = spec.dense_flops * spec.attention_efficiency
    mem = spec.hbm_bandwidth * spec.memory_efficiency
    units = {}
    for kind in ("embed", "attn", "mlp", "head"):
        ops, fwd, bwd = {}, 0.0, 0.0
        for op in models.unit_ops(cfg.family, kind):
            flops, moved = _op_costs(cfg, op, seq_len, micro_batch)
            if op == "attn_core":
                t, back = flops / attn, 2.5
            elif flops:
                t, back = flops / mm, 2.0
            else:
                t, back = moved / mem, 2.0
            ops[op] = OpProfile(t, float(act[op]))
            fwd += t
            bwd += back * t
        if kind == "head":  # cross-entropy on float32 logits: read them, write the grads
            loss = 2 * micro_batch * seq_len * cfg.vocab_size * 4 / mem
            fwd += loss
            bwd += loss
        units[kind] = UnitProfile(fwd, bwd, float(weight_bytes(abstract_unit_params(cfg, kind))),
                                  float(info.unit_input_bytes(traced, kind, seq_len, micro_batch)), ops)
    return Profile(cfg.name, f"analytic:{spec.name}", cfg.num_layers, seq_len, micro_batch,
                   spec.host_bandwidth, spec.p2p_bandwidth, spec.p2p_latency, units, cfg.family)
