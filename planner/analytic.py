"""A profile derived from model shapes, for when no GPU profile exists.

Bytes are exact: activation and input bytes come from the residuals `jax.vjp`
keeps (models.info traces them on abstract shapes), weight bytes from the
abstract params plus gradients plus the engine optimizer's state (optax adamw,
traced with jax.eval_shape). Times are a roofline estimate at the device's achieved
rates (planner.device, partly assumed), so the profile's "device" says
"analytic:<device>":
- matmul ops: 2*M*N*K FLOPs at the achieved GEMM rate;
- attention core: causal flash attention, 2*B*T^2*D FLOPs (half of 4*B*T^2*D)
  at the achieved flash-attention rate;
- everything else (norms, RoPE, SiLU/GELU, mul, residual adds, the embedding
  gather, the loss) is memory-bound: bytes read + written at the achieved HBM rate.
Backward = 2x forward for matmuls and elementwise ops, 2.5x for flash attention
(its backward recomputes the scores). A unit's fwd_time is the sum of its ops
(the head adds its cross-entropy); "full" recompute costs that fwd_time.
"""
from __future__ import annotations

import jax
import optax

import models
import models.info as info
from models.config import ModelConfig
from models.units import abstract_unit_params, tree_bytes
from planner.device import DeviceSpec, device_spec
from planner.errors import ProfileError
from planner.profile import OpProfile, Profile, UnitProfile


def _op_costs(cfg: ModelConfig, op: str, seq_len: int, micro_batch: int) -> tuple[float, float]:
    """(FLOPs if compute-bound else 0, bytes moved if memory-bound else 0), forward.
    The roofline knows the built-in families' ops; a family of your own is measured."""
    B, T, D = micro_batch, seq_len, cfg.hidden
    F, V, H = cfg.ffn_hidden, cfg.vocab_size, cfg.head_dim
    N, K = cfg.num_heads, cfg.num_kv_heads
    c = cfg.compute_bytes
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
    if op not in moved:
        raise ProfileError(f"the analytic profile has no cost for op {op!r} of {cfg.name} ({cfg.family}): "
                           "measure the model with `obscura profile` instead")
    return 0.0, float(moved[op])


# The built-in families' weight matmuls: the op naming a matmul's output -> the op
# naming its input (mlp_down's is the family's gated product, else its activation).
_MATMUL_INPUT = {"q": "attn_norm", "k": "attn_norm", "v": "attn_norm", "qkv": "attn_norm",
                 "attn_proj": "attn_core", "mlp_gate": "mlp_norm", "mlp_up": "mlp_norm",
                 "mlp_down": ("mlp_mul", "mlp_act"), "logits": "final_norm"}


def _width(cfg: ModelConfig, op: str) -> int:
    """Elements per token of an op's value (its last dimensions)."""
    D, F, V = cfg.hidden, cfg.ffn_hidden, cfg.vocab_size
    N, K, H = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
    widths = {"attn_norm": D, "mlp_norm": D, "final_norm": D, "attn_core": N * H, "q": N * H, "k": K * H,
              "v": K * H, "qkv": 3 * N * H, "attn_proj": D, "mlp_gate": F, "mlp_up": F, "mlp_act": F,
              "mlp_mul": F, "mlp_down": D, "logits": V, "embed": D}
    if op not in widths:
        raise ProfileError(f"the analytic profile has no shape for op {op!r} of {cfg.name} ({cfg.family}): "
                           "measure the model with `obscura profile` instead")
    return widths[op]


def _weight_matmuls(cfg: ModelConfig, kind: str) -> tuple[list[str], set[str]]:
    """(the ops naming the unit's weight matmuls' outputs, the ops naming their inputs)."""
    ops = models.unit_ops(cfg.family, kind)
    outs = [o for o in ops if o in _MATMUL_INPUT]
    ins = set()
    for o in outs:
        src = _MATMUL_INPUT[o]
        ins.add(src if isinstance(src, str) else next(s for s in src if s in ops))
    return outs, ins


def weight_grad_bytes(cfg: ModelConfig, kind: str, seq_len: int, micro_batch: int) -> int:
    """What a unit's W holds from its I at least (the engine's split backward holds
    exactly this, obscura_jax/runtime/backward_split.py): each weight matmul's output
    cotangent and each distinct input (q, k and v share one; gate and up one), in the
    compute dtype. The embedding's gradient (a scatter-add of its output's cotangent)
    is finished in I: its W holds nothing."""
    tokens, c = seq_len * micro_batch, cfg.compute_bytes
    if kind == "embed":
        return 0
    outs, ins = _weight_matmuls(cfg, kind)
    return tokens * c * sum(_width(cfg, op) for op in outs + sorted(ins))


def weight_grad_flops(cfg: ModelConfig, kind: str, seq_len: int, micro_batch: int) -> float:
    """FLOPs of a unit's W: one matmul per weight matmul of its forward (x^T dy)."""
    return sum(_op_costs(cfg, op, seq_len, micro_batch)[0] for op in _weight_matmuls(cfg, kind)[0])


def head_weight_grad_at_once(cfg: ModelConfig, seq_len: int, micro_batch: int) -> bool:
    """The runtime's rule for the head's W (docs/formats.md, `weight_grad_bytes`):
    computed at once, inside I, when it holds more bytes per FLOP of W than a
    transformer layer does: deferring it would fill a bubble at a higher memory price
    than any layer's W. Both scale with the tokens, so only the shapes decide (the
    head's 1/h + 1/V against about 1.33/h for Llama-2's layer: at once when the
    vocabulary is under about 3x the hidden size). False for a family whose ops the
    analytic shapes do not know."""
    try:
        head = weight_grad_bytes(cfg, "head", seq_len, micro_batch) / weight_grad_flops(cfg, "head", seq_len,
                                                                                         micro_batch)
        kinds = models.get_family(cfg.family).layer_kinds
        layer = (sum(weight_grad_bytes(cfg, k, seq_len, micro_batch) for k in kinds)
                 / sum(weight_grad_flops(cfg, k, seq_len, micro_batch) for k in kinds))
    except (ProfileError, ZeroDivisionError):
        return False
    return head > layer


def adamw_state_bytes(params) -> int:
    """Bytes of optax adamw's state for `params` (abstract shapes; nothing allocated)."""
    return tree_bytes(jax.eval_shape(optax.adamw(1e-3).init, params))


def training_state_bytes(params) -> int:
    """What a unit's weights cost a stage: params + grads (same shapes) + adamw state."""
    return 2 * tree_bytes(params) + adamw_state_bytes(params)


def analytic_profile(cfg: ModelConfig, seq_len: int, micro_batch: int, device: str = "A100-80GB",
                     spec: DeviceSpec | None = None) -> Profile:
    """Profile of `cfg` at (seq_len, micro_batch) on `device` (a planner.device.DEVICES
    key) or on an explicit DeviceSpec."""
    spec = spec or device_spec(device)
    for op in models.ops_for(cfg.family):   # every op has a cost before anything is traced
        _op_costs(cfg, op, seq_len, micro_batch)
    traced = cfg.replace(attention_impl="xla")  # same named residuals; traceable on any host
    act = info.op_act_bytes(traced, seq_len, micro_batch)
    mm, attn, mem = spec.matmul_flops, spec.flash_attention_flops, spec.hbm_bandwidth
    units = {}
    at_once = head_weight_grad_at_once(cfg, seq_len, micro_batch)
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
        held = 0.0 if kind == "head" and at_once else float(weight_grad_bytes(cfg, kind, seq_len, micro_batch))
        units[kind] = UnitProfile(fwd, bwd, float(training_state_bytes(abstract_unit_params(cfg, kind))),
                                  float(info.unit_input_bytes(traced, kind, seq_len, micro_batch)), ops,
                                  weight_grad_bytes=held)
    return Profile(cfg.name, f"analytic:{spec.name}", cfg.num_layers, seq_len, micro_batch,
                   spec.host_bandwidth, spec.p2p_bandwidth, spec.p2p_latency, units, cfg.family)
