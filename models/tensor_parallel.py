"""How a model's parameters shard over a tensor-parallel mesh axis (Megatron's
layout), read from its family's registration (models.registry, `tensor_parallel`).

    column  kernel [in, out] -> P(None, "tensor"), bias [out] -> P("tensor")
            (q, k, v, gate, up: each device computes its heads / its FFN columns;
            the head's vocabulary)
    kv_column  k and v under grouped-query attention: a column while the KV heads
            divide over T; replicated when T is a multiple of them (Megatron's
            choice: each device keeps the KV heads its query heads read)
    row     kernel [in, out] -> P("tensor", None)
            (attention out, MLP down: partial sums, one all-reduce after them)
    other   replicated (norms, embeddings, a row layer's bias)

Activations enter and leave every unit replicated over the tensor axis (no
sequence parallelism): XLA's sharding propagation (GSPMD) inserts the all-reduce
after each row layer, and the head's loss reduces over the sharded vocabulary.
"""
from __future__ import annotations

import jax
from jax.sharding import PartitionSpec as P

from models.config import ModelConfig
from models.errors import ModelConfigError
from models.registry import get_family
from models.units import abstract_params, unit_kind

TENSOR_AXIS = "tensor"
DATA_AXIS = "data"


def _role_spec(role: str, ndim: int) -> P:
    if role in ("column", "kv_column"):
        return P(*([None] * (ndim - 1)), TENSOR_AXIS)
    if ndim < 2:   # a row layer's bias is added after the all-reduce: replicated
        return P()
    return P(TENSOR_AXIS, *([None] * (ndim - 1)))


def _rules(cfg: ModelConfig) -> dict[str, dict[str, str]]:
    return {kind: dict(rules) for kind, rules in get_family(cfg.family).tensor_layout}


def _leaf_path(path) -> tuple[str, str]:
    """(unit name, 'module/param') of a stage-params leaf path."""
    keys = [str(getattr(k, "key", getattr(k, "name", k))) for k in path]
    return keys[0], "/".join(keys[1:])


def tensor_specs(cfg: ModelConfig, params, tensor: int):
    """PartitionSpec per leaf of `params` (unit name -> tree, a stage's or the whole
    model's), or all replicated at tensor-parallel 1."""
    rules = _rules(cfg) if tensor > 1 else {}
    kv_split = cfg.num_kv_heads % tensor == 0

    def spec(path, leaf):
        unit, name = _leaf_path(path)
        role = rules.get(unit_kind(unit), {}).get(name)
        if role is None or (role == "kv_column" and not kv_split):
            return P()
        return _role_spec(role, len(leaf.shape))
    return jax.tree_util.tree_map_with_path(spec, params)


def check_tensor_parallel(cfg: ModelConfig, tensor: int, params_like=None) -> None:
    """Raise ModelConfigError (one line) when `cfg` cannot shard `tensor` ways: the
    family declares no layout, or heads, KV heads, FFN width or any sharded
    dimension is not divisible by it."""
    if tensor < 1:
        raise ModelConfigError(f"tensor parallelism must be >= 1, got {tensor}")
    if tensor == 1:
        return
    if not get_family(cfg.family).tensor_layout:
        raise ModelConfigError(f"model family {cfg.family!r} declares no tensor-parallel layout "
                               "(register_family(..., tensor_parallel=...)): it trains only at tensor "
                               "parallelism 1")
    for what, n in (("attention heads", cfg.num_heads), ("FFN width", cfg.ffn_hidden)):
        if n % tensor:
            raise ModelConfigError(f"{cfg.name}: {what} ({n}) not divisible by tensor parallelism {tensor}")
    if cfg.num_kv_heads % tensor and tensor % cfg.num_kv_heads:
        raise ModelConfigError(f"{cfg.name}: KV heads ({cfg.num_kv_heads}) neither divide nor are divisible by "
                               f"tensor parallelism {tensor}")
    if params_like is None:
        params_like = abstract_params(cfg)
    specs = tensor_specs(cfg, params_like, tensor)
    for (path, leaf), spec in zip(jax.tree_util.tree_flatten_with_path(params_like)[0],
                                  jax.tree.leaves(specs, is_leaf=lambda x: isinstance(x, P))):
        for dim, axis in enumerate(spec):
            if axis == TENSOR_AXIS and leaf.shape[dim] % tensor:
                unit, name = _leaf_path(path)
                raise ModelConfigError(f"{cfg.name}: {unit}/{name} dim {dim} ({leaf.shape[dim]}) not "
                                       f"divisible by tensor parallelism {tensor}")
