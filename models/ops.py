"""The op vocabulary: every activation worth a save/recompute/offload decision is
tagged with `jax.ad_checkpoint.checkpoint_name(x, NAME)` using one of these names.

Ops are listed in forward order. Unit kinds own disjoint op sets:
  embed: embed (token lookup; GPT adds learned positions)
  attn:  attn_norm .. attn_res        mlp: mlp_norm .. mlp_res
  head:  final_norm, logits
Notes on what each name tags (so profiles and plans mean the same thing):
  q, k, v      projections, [B,T,heads,head_dim]; q_rope/k_rope: after RoPE (llama)
  qkv          GPT's fused projection [B,T,3*D] (q/k/v are cheap slices of it)
  attn_core    attention output before the output projection, [B,T,D]; the
               softmax internals are never named, so they are always recomputed
               (flash-attention style) under every policy
  attn_proj    output projection; attn_res = x + attn_proj (the unit's output)
  mlp_act      SiLU(gate) for llama, GELU(up) for gpt; mlp_mul = act * up (llama)
"""
from __future__ import annotations

LLAMA_OPS: tuple[str, ...] = (
    "embed",
    "attn_norm", "q", "k", "v", "q_rope", "k_rope", "attn_core", "attn_proj", "attn_res",
    "mlp_norm", "mlp_gate", "mlp_up", "mlp_act", "mlp_mul", "mlp_down", "mlp_res",
    "final_norm", "logits",
)

GPT_OPS: tuple[str, ...] = (
    "embed",
    "attn_norm", "qkv", "attn_core", "attn_proj", "attn_res",
    "mlp_norm", "mlp_up", "mlp_act", "mlp_down", "mlp_res",
    "final_norm", "logits",
)

# Union over families, in a stable order (llama first, then gpt-only names).
ALL_OPS: tuple[str, ...] = LLAMA_OPS + tuple(o for o in GPT_OPS if o not in LLAMA_OPS)

UNIT_KINDS: tuple[str, ...] = ("embed", "attn", "mlp", "head")


def _kind_of(op: str) -> str:
    if op == "embed":
        return "embed"
    if op in ("final_norm", "logits"):
        return "head"
    return "mlp" if op.startswith("mlp_") else "attn"


def ops_for(family: str) -> tuple[str, ...]:
    """All op names of a model family, in forward order."""
    if family == "llama":
        return LLAMA_OPS
    if family == "gpt":
        return GPT_OPS
    from models.config import ModelConfigError
    raise ModelConfigError(f"unknown model family {family!r}; valid: llama, gpt")


def unit_ops(family: str, kind: str) -> tuple[str, ...]:
    """The ops a unit of `kind` ("embed" | "attn" | "mlp" | "head") contains."""
    if kind not in UNIT_KINDS:
        from models.config import ModelConfigError
        raise ModelConfigError(f"unknown unit kind {kind!r}; valid: {', '.join(UNIT_KINDS)}")
    return tuple(o for o in ops_for(family) if _kind_of(o) == kind)


def op_unit_kind(op: str) -> str:
    """Which unit kind an op name belongs to."""
    if op not in ALL_OPS:
        from models.config import ModelConfigError
        raise ModelConfigError(f"unknown op {op!r}; valid ops: {', '.join(ALL_OPS)}")
    return _kind_of(op)


def _preset_ops(family: str) -> dict[str, frozenset[str]]:
    ops = ops_for(family)
    cmb = ("attn_norm", "mlp_norm", "final_norm", "mlp_act", "mlp_mul")
    return {
        "none": frozenset(),
        "full": frozenset(ops),
        "selective": frozenset({"attn_core"}),   # Megatron-style: attention core only
        "mlp": frozenset(o for o in ops if o.startswith("mlp_")),
        # CMB (paper section 8): cheap-to-recompute, memory-heavy ops: the norms,
        # the activation and the gating mul.
        "cmb": frozenset(o for o in cmb if o in ops),
    }


POLICY_PRESETS: tuple[str, ...] = ("none", "full", "selective", "mlp", "cmb")


def preset_ops(name: str, family: str) -> frozenset[str]:
    """The recompute set a preset stands for in a family."""
    presets = _preset_ops(family)
    if name not in presets:
        from models.config import ModelConfigError
        raise ModelConfigError(
            f"unknown policy preset {name!r}; valid presets: {', '.join(POLICY_PRESETS)}")
    return presets[name]
