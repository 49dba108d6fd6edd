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

import functools
from dataclasses import dataclass

import jax
import jax.extend.core as jex_core
import jax.numpy as jnp

from models.config import ModelConfig, ModelConfigError
from models.layers import resolve_attention_impl
from models.registry import get_family, ops_for, preset_names, preset_ops, unit_ops
from models.policy import RecomputePolicy, resolve_policy
from models.stage import model_loss, unit_apply_fn
from models.units import (abstract_unit_params, count_params, init_params, leaf_bytes, tree_bytes, tree_size,
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
    return _traced_residuals(cfg, kind, pol, seq_len, micro_batch)


@functools.lru_cache(maxsize=4096)
def _traced_residuals(cfg: ModelConfig, kind: str, pol: RecomputePolicy, seq_len: int,
                      micro_batch: int) -> Residuals:
    """unit_residuals, traced once per (config, kind, policy, shape) in a process: the
    planner, the profiler's analytic figures and the memory check ask for the same
    units again and again (a Fig. 12 row traces each unit kind under every op set)."""
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


class UnitContractError(ModelConfigError):
    """A unit that breaks the family's contract; `kind` says which."""

    def __init__(self, message: str, kind: str):
        super().__init__(message)
        self.kind = kind


def _unit_call(cfg: ModelConfig, kind: str):
    """(function, abstract args) of one unit's forward as the engine calls it."""
    fn = unit_apply_fn(cfg, kind, "none")
    params = abstract_unit_params(cfg, kind)
    if kind == "head" and cfg.tie_embeddings:
        table = abstract_unit_params(cfg, "embed")["tokens"]["embedding"]
        return (lambda p, x, t: fn(p["head"], x, t, p["table"])), {"head": params, "table": table}
    return fn, params


def tagged_names(jaxpr) -> set[str]:
    """Every checkpoint_name in a jaxpr, its sub-jaxprs (checkpoint, pjit, custom_vjp) included."""
    names: set[str] = set()
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "name":
            names.add(eqn.params.get("name"))
        for value in eqn.params.values():
            for sub in (value if isinstance(value, (tuple, list)) else (value,)):
                inner = getattr(sub, "jaxpr", sub)
                if hasattr(inner, "eqns"):
                    names |= tagged_names(inner)
    return names


def check_units(cfg: ModelConfig, seq_len: int, micro_batch: int) -> None:
    """The unit contract of the family's registration (models.registry), on traced
    programs (nothing allocated): embed, attn, mlp and block return [B,T,D] floats
    (or (y, aux) with a scalar float aux loss), the head a scalar float loss, and
    every op the family registers for a kind is tagged with checkpoint_name in that
    kind's traced forward. One ModelConfigError naming the unit kind and its class."""
    check_sizes(cfg, seq_len, micro_batch)
    family = get_family(cfg.family)
    for kind in family.kinds:
        cls = family.unit_class(kind)
        where = f"the {cfg.family} family's {kind} unit ({getattr(cls, '__qualname__', cls)})"
        fn, params = _unit_call(cfg, kind)
        closed, out = jax.make_jaxpr(fn, return_shape=True)(params, *_input_specs(cfg, kind, seq_len, micro_batch))
        if kind == "head":
            if getattr(out, "shape", None) != () or not jnp.issubdtype(out.dtype, jnp.floating):
                raise UnitContractError(f"{where} returns {_describe(out)}: the head returns a scalar float loss", kind)
        else:
            y, aux = out if isinstance(out, tuple) and len(out) == 2 else (out, None)
            want = (micro_batch, seq_len, cfg.hidden)
            if getattr(y, "shape", None) != want or not jnp.issubdtype(y.dtype, jnp.floating):
                raise UnitContractError(f"{where} returns {_describe(y)}: a unit returns floats of shape {want} "
                                       "([B, T, hidden])", kind)
            if aux is not None and (getattr(aux, "shape", None) != () or not jnp.issubdtype(aux.dtype, jnp.floating)):
                raise UnitContractError(f"{where} returns an auxiliary loss of {_describe(aux)}: it must be a "
                                       "scalar float", kind)
        missing = [op for op in family.unit_ops(kind) if op not in tagged_names(closed.jaxpr)]
        if missing:
            raise UnitContractError(f"{where} never tags {missing[0]!r} (checkpoint_name) in its forward, though "
                                   f"the family registers it among the {kind} ops", kind)


def _describe(x) -> str:
    if isinstance(x, tuple):
        return f"a tuple of {len(x)}"
    shape, dtype = getattr(x, "shape", None), getattr(x, "dtype", None)
    return f"{dtype} of shape {shape}" if shape is not None else type(x).__name__


def check_finite_loss(cfg: ModelConfig, seq_len: int) -> None:
    """One layer of `cfg` with real parameters (seed 0) on one row of random tokens
    gives a finite loss, else one ModelConfigError. Allocates that one-layer model:
    for a family's own check (model-info of a user module), not for every config."""
    small = cfg.replace(num_layers=1)
    tokens = jax.random.randint(jax.random.key(0), (1, seq_len), 0, cfg.vocab_size, jnp.int32)
    loss = jax.jit(lambda p, t: model_loss(small, p, t, t))(init_params(small, 0), tokens)
    if not bool(jnp.isfinite(loss)):
        raise ModelConfigError(f"{cfg.name} gives a loss of {float(loss)} on one layer, seed 0 and random tokens: "
                               "a model's loss must be finite")


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
