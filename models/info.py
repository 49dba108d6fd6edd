"""Model facts measured from traced programs, never from formulas: parameter
counts from abstract shapes, activation bytes from the residuals `jax.vjp` keeps.

Everything here traces with `jax.make_jaxpr` on ShapeDtypeStructs, so a 28B model
is measured without allocating a single weight.

Residual bytes of a unit = the leaves of `jax.vjp(unit, params, x)`'s backward
function, deduplicated, minus the parameters (they are the stage's weights, not
activations). The unit's input (and the head's targets) stay in: a unit keeps
them for its backward, so a layer's figure is what one attention + MLP layer adds
to a stage's activation memory per micro-batch. Offloaded residuals (in pinned
host memory) are counted apart.
"""
from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.extend.core as jex_core
import jax.numpy as jnp

from models.config import ModelConfig, ModelConfigError
from models.layers import resolve_attention_impl
from models.registry import get_family, ops_for, preset_names, preset_ops, unit_ops
from models.policy import RecomputePolicy, resolve_policy
from models.stage import unit_apply_fn
from models.units import (abstract_unit_params, count_params, leaf_bytes, tree_bytes, tree_size,
                          unit_kind, unit_names, unit_param_count)


@dataclass(frozen=True)
class Residuals:
    input_bytes: int      # the unit's own inputs kept for its backward
    device_bytes: int     # named activations kept on device
    host_bytes: int       # activations offloaded to pinned host memory

    @property
    def kept_bytes(self) -> int:
        """Device memory one micro-batch holds for this unit: input + activations."""
        return self.input_bytes + self.device_bytes


def check_sizes(cfg: ModelConfig, seq_len: int, micro_batch: int) -> None:
    for what, v in (("seq len", seq_len), ("micro-batch", micro_batch)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ModelConfigError(f"{what} must be a positive integer, got {v!r}")
    if seq_len > cfg.max_seq_len:
        raise ModelConfigError(f"seq len {seq_len} exceeds {cfg.name}'s max_seq_len {cfg.max_seq_len}")
    impl = resolve_attention_impl(cfg, jnp.dtype(cfg.compute_dtype))
    if impl == "cudnn" and jax.default_backend() != "gpu":
        raise ModelConfigError(
            "cudnn attention can only be traced on a GPU with cuDNN; use --attention xla here")


def _input_specs(cfg: ModelConfig, kind: str, seq_len: int, micro_batch: int) -> tuple:
    tokens = jax.ShapeDtypeStruct((micro_batch, seq_len), jnp.int32)
    if kind == "embed":
        return (tokens,)
    hidden = jax.ShapeDtypeStruct((micro_batch, seq_len, cfg.hidden), jnp.dtype(cfg.compute_dtype))
    if kind == "head":
        return (hidden, tokens)  # targets: kept by the loss's backward like an input
    return (hidden,)


def unit_residuals(cfg: ModelConfig, kind: str, policy, seq_len: int, micro_batch: int) -> Residuals:
    """Measured residual bytes of one unit of `kind` under `policy`."""
    if kind not in get_family(cfg.family).kinds:
        raise ModelConfigError(f"unknown unit kind {kind!r}; valid: {', '.join(get_family(cfg.family).kinds)}")
    check_sizes(cfg, seq_len, micro_batch)
    pol = policy if isinstance(policy, RecomputePolicy) else resolve_policy(policy, cfg.family)
    fn = unit_apply_fn(cfg, kind, pol)
    params = abstract_unit_params(cfg, kind)
    if kind == "head" and cfg.tie_embeddings:
        params = {"head": params, "table": abstract_unit_params(cfg, "embed")["tokens"]["embedding"]}

    def backward_leaves(params, x, *rest):
        if kind == "head":
            if cfg.tie_embeddings:
                f = lambda p, x: fn(p["head"], x, rest[0], p["table"])  # noqa: E731
            else:
                f = lambda p, x: fn(p, x, rest[0])  # noqa: E731
        else:
            f = fn
        _, backward = jax.vjp(f, params, x)
        return jax.tree.leaves(backward)

    closed = jax.make_jaxpr(backward_leaves)(params, *_input_specs(cfg, kind, seq_len, micro_batch))
    n_param = len(jax.tree.leaves(params))
    param_vars = set(closed.jaxpr.invars[:n_param])
    input_vars = set(closed.jaxpr.invars[n_param:])
    seen, inp, dev, host = set(), 0, 0, 0
    for v in closed.jaxpr.outvars:
        if isinstance(v, jex_core.Literal) or v in seen or v in param_vars:
            continue
        seen.add(v)
        nbytes = leaf_bytes(v.aval)
        if v in input_vars:
            inp += nbytes
        elif getattr(v.aval, "memory_space", None) == jax.memory.Space.Host:
            host += nbytes
        else:
            dev += nbytes
    return Residuals(inp, dev, host)


def unit_residual_bytes(cfg: ModelConfig, unit_kind: str, policy, seq_len: int,
                        micro_batch: int) -> int:
    """Device bytes one micro-batch keeps for a unit (input + saved activations)."""
    return unit_residuals(cfg, unit_kind, policy, seq_len, micro_batch).kept_bytes


def unit_input_bytes(cfg: ModelConfig, kind: str, seq_len: int, micro_batch: int) -> int:
    """What a unit keeps when everything is recomputed (its inputs)."""
    return unit_residual_bytes(cfg, kind, "full", seq_len, micro_batch)


def op_act_bytes(cfg: ModelConfig, seq_len: int, micro_batch: int) -> dict[str, int]:
    """Per-op activation bytes, measured: within each unit kind, the ops are saved
    one more at a time in forward order and each op is credited with the growth of
    the measured residual. The credits telescope, so for every unit
    input_bytes + sum(act_bytes) equals the measured residual under `none` (and
    under `full` trivially). Ops whose value the backward never reads (attn_proj,
    attn_res, mlp_down, mlp_res, embed) get 0. Caveat of any per-op split: saving
    q_rope makes q unneeded, so q carries those bytes and q_rope 0; recomputing q
    alone frees nothing while q_rope is saved (use unit_residual_bytes for the
    exact figure of any set)."""
    out: dict[str, int] = {}
    for kind in get_family(cfg.family).kinds:
        ops = unit_ops(cfg.family, kind)
        all_ops = set(preset_ops("full", cfg.family))
        prev = unit_residual_bytes(cfg, kind, "full", seq_len, micro_batch)
        for i, op in enumerate(ops):
            saved = set(ops[: i + 1])
            cur = unit_residual_bytes(cfg, kind, sorted(all_ops - saved), seq_len, micro_batch)
            out[op] = cur - prev
            prev = cur
    return out


def layer_residual_bytes(cfg: ModelConfig, policy, seq_len: int, micro_batch: int) -> int:
    """Measured device residual bytes of one attention + MLP layer under `policy`
    (under `layer`: the layer's input, what its one checkpoint keeps)."""
    pol = policy if isinstance(policy, RecomputePolicy) else resolve_policy(policy, cfg.family)
    layer = get_family(cfg.family).layer_kinds
    if pol.layer:
        return unit_input_bytes(cfg, layer[0], seq_len, micro_batch)
    return sum(unit_residual_bytes(cfg, k, policy, seq_len, micro_batch) for k in layer)


def flops_params(cfg: ModelConfig) -> int:
    """N of the MFU convention: every parameter except the input embedding lookups
    (token and learned-position tables), which cost no FLOPs. The output projection
    counts: its matmul is real work (with tied embeddings it is the token table)."""
    embed = unit_param_count(cfg, "embed")
    tied_output = cfg.vocab_size * cfg.hidden if cfg.tie_embeddings else 0
    return count_params(cfg) - embed + tied_output


def flops_per_token(cfg: ModelConfig, seq_len: int) -> int:
    """6N + 12*L*H*Q*T: forward+backward FLOPs per token (MFU convention: full,
    non-causal attention; recompute not counted)."""
    return 6 * flops_params(cfg) + 12 * cfg.num_layers * cfg.num_heads * cfg.head_dim * seq_len


def model_info(cfg: ModelConfig, seq_len: int, micro_batch: int) -> dict:
    """Everything `obscura model-info` prints and the profiler reuses."""
    check_sizes(cfg, seq_len, micro_batch)
    act = op_act_bytes(cfg, seq_len, micro_batch)
    kinds = {}
    for kind in get_family(cfg.family).kinds:
        params = abstract_unit_params(cfg, kind)
        kinds[kind] = {
            "params": tree_size(params),
            "param_bytes": tree_bytes(params),
            "input_bytes": unit_input_bytes(cfg, kind, seq_len, micro_batch),
            "ops": {op: {"act_bytes": act[op]} for op in unit_ops(cfg.family, kind)},
        }
    policies = {}
    for name in preset_names(cfg.family):
        pol = resolve_policy(name, cfg.family)
        measured = layer_residual_bytes(cfg, pol, seq_len, micro_batch)
        formula = sum(kinds[k]["input_bytes"] + sum(
            v["act_bytes"] for op, v in kinds[k]["ops"].items() if op not in pol.recompute)
            for k in get_family(cfg.family).layer_kinds)
        policies[name] = {"recompute": [o for o in ops_for(cfg.family) if o in pol.recompute],
                          "residual_bytes_per_layer": measured,
                          "op_sum_bytes_per_layer": formula}
    none = policies["none"]["residual_bytes_per_layer"]
    for p in policies.values():
        p["saving_vs_none"] = 1.0 - p["residual_bytes_per_layer"] / none if none else 0.0
    return {
        "format": "obscura-model-info/1",
        "model": cfg.name, "family": cfg.family,
        "seq_len": seq_len, "micro_batch": micro_batch,
        "compute_dtype": cfg.compute_dtype, "param_dtype": cfg.param_dtype,
        "attention_impl": resolve_attention_impl(cfg, jnp.dtype(cfg.compute_dtype)),
        "num_layers": cfg.num_layers, "hidden": cfg.hidden, "num_heads": cfg.num_heads,
        "num_kv_heads": cfg.num_kv_heads, "ffn_hidden": cfg.ffn_hidden,
        "vocab_size": cfg.vocab_size,
        "params": count_params(cfg),
        "flops_params": flops_params(cfg),
        "flops_per_token": flops_per_token(cfg, seq_len),
        "flops_convention": "6N + 12*L*H*Q*T; N = all params except the input embedding "
                            "tables (the output projection counts)",
        "units": [{"name": n, "kind": unit_kind(n), "params": kinds[unit_kind(n)]["params"]}
                  for n in unit_names(cfg)],
        "unit_kinds": kinds,
        "policies": policies,
        "none_means": "save every named op (save_only_these_names over the whole "
                      "vocabulary); unnamed intermediates are recomputed",
    }
