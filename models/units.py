"""Partition units and their parameters.

A model is 2L+2 units: embed, attn_0, mlp_0, ..., attn_{L-1}, mlp_{L-1}, head
(L+2 for a parallel-block family: embed, block_0, ..., block_{L-1}, head).
Params are a plain dict keyed by unit name; each value is the pure-dict state of
that unit's NNX module (nested dicts of arrays), so optax, orbax and jax.tree
work on it directly and a stage's subset is a dict slice.
"""
from __future__ import annotations

import functools
import math
import re

import jax
from flax import nnx

from models.config import ModelConfig, ModelConfigError
from models.registry import get_family

_UNIT_RE = re.compile(r"(attn|mlp|block)_(\d+)")


def unit_names(cfg: ModelConfig) -> list[str]:
    names = ["embed"]
    layer = get_family(cfg.family).layer_kinds    # attn, mlp; or block (a parallel block)
    for i in range(cfg.num_layers):
        names += [f"{k}_{i}" for k in layer]
    return names + ["head"]


def unit_kind(name: str) -> str:
    """'embed' | 'attn' | 'mlp' | 'block' | 'head' for a unit name."""
    if name in ("embed", "head"):
        return name
    m = _UNIT_RE.fullmatch(name)
    if not m:
        raise ModelConfigError(f"unknown unit {name!r}; units are embed, attn_<i>, mlp_<i> (or block_<i>), head")
    return m.group(1)


def even_partition(num_units: int, num_stages: int) -> list[tuple[int, int]]:
    """The paper's even split: the 2L inner units spread 2L/p per stage, embed joins
    the first stage and head the last (so those two hold one unit more). When p does
    not divide 2L, the extra units go to the later middle stages first: early stages
    keep the most in-flight micro-batches in 1F1B and the last one holds the head's
    logits. Returns half-open (start, end) unit ranges."""
    for what, v in (("num_units", num_units), ("num_stages", num_stages)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ModelConfigError(f"{what} must be a positive integer, got {v!r}")
    if num_units < 2:
        raise ModelConfigError(f"a model has at least 2 units (embed, head), got {num_units}")
    if num_stages > num_units:
        raise ModelConfigError(f"cannot split {num_units} units into {num_stages} non-empty stages")
    inner = num_units - 2
    counts = [inner // num_stages] * num_stages
    order = list(range(num_stages - 2, 0, -1)) + [0, num_stages - 1]
    for s in order[: inner % num_stages]:
        counts[s] += 1
    counts[0] += 1
    counts[-1] += 1
    ranges, start = [], 0
    for c in counts:
        ranges.append((start, start + c))
        start += c
    return ranges


def check_unit_range(cfg: ModelConfig, unit_range) -> tuple[int, int]:
    try:
        start, end = (int(unit_range[0]), int(unit_range[1]))
        if len(unit_range) != 2:
            raise TypeError
    except (TypeError, ValueError, IndexError):
        raise ModelConfigError(f"unit range must be (start, end), got {unit_range!r}") from None
    if not 0 <= start < end <= cfg.num_units:
        raise ModelConfigError(
            f"unit range [{start}, {end}) is not a non-empty range inside the "
            f"{cfg.num_units} units of {cfg.name}")
    return start, end


def unit_module(cfg: ModelConfig, kind: str, rngs: nnx.Rngs) -> nnx.Module:
    """A fresh module of one unit kind: the class the config's family registered."""
    return get_family(cfg.family).unit_class(kind)(cfg, rngs)


@functools.lru_cache(maxsize=None)
def unit_graphdef(cfg: ModelConfig, kind: str):
    """The NNX graph definition of a unit kind (built abstractly, no allocation)."""
    graphdef, _ = nnx.split(nnx.eval_shape(lambda: unit_module(cfg, kind, nnx.Rngs(0))))
    return graphdef


@functools.lru_cache(maxsize=None)
def abstract_unit_params(cfg: ModelConfig, kind: str) -> dict:
    """ShapeDtypeStructs of one unit's params (jax.eval_shape: nothing allocated)."""
    module = nnx.eval_shape(lambda: unit_module(cfg, kind, nnx.Rngs(0)))
    return nnx.to_pure_dict(nnx.split(module)[1])


@functools.lru_cache(maxsize=None)
def _jitted_unit_init(cfg: ModelConfig, kind: str):
    def init(key):
        return nnx.to_pure_dict(nnx.split(unit_module(cfg, kind, nnx.Rngs(key)))[1])
    return jax.jit(init)


def init_params(cfg: ModelConfig, seed: int = 0, unit_range=None) -> dict:
    """Real parameters for every unit (or only those in `unit_range`, so a stage can
    initialise just its own). Unit i is seeded by fold_in(key(seed), i), so any
    subset equals the same slice of the whole model's params."""
    start, end = check_unit_range(cfg, unit_range) if unit_range is not None else (0, cfg.num_units)
    root = jax.random.key(seed)
    names = unit_names(cfg)
    return {names[i]: _jitted_unit_init(cfg, unit_kind(names[i]))(jax.random.fold_in(root, i))
            for i in range(start, end)}


def abstract_params(cfg: ModelConfig) -> dict:
    """The whole model's params as ShapeDtypeStructs (all layers share one shape)."""
    return {name: abstract_unit_params(cfg, unit_kind(name)) for name in unit_names(cfg)}


def tree_size(tree) -> int:
    """Elements in a pytree of arrays or ShapeDtypeStructs."""
    return sum(math.prod(leaf.shape) for leaf in jax.tree.leaves(tree))


def leaf_bytes(leaf) -> int:
    """Bytes of one array, ShapeDtypeStruct or abstract value."""
    return math.prod(leaf.shape) * leaf.dtype.itemsize


def tree_bytes(tree) -> int:
    """Bytes of a pytree of arrays or ShapeDtypeStructs (nothing is read)."""
    return sum(leaf_bytes(leaf) for leaf in jax.tree.leaves(tree))


def unit_param_count(cfg: ModelConfig, kind: str) -> int:
    return tree_size(abstract_unit_params(cfg, kind))


def count_params(cfg: ModelConfig) -> int:
    """Exact parameter count, from abstract shapes."""
    return (unit_param_count(cfg, "embed") + unit_param_count(cfg, "head")
            + cfg.num_layers * sum(unit_param_count(cfg, k) for k in get_family(cfg.family).layer_kinds))


def stage_params(params: dict, unit_range, cfg: ModelConfig | None = None) -> dict:
    """The subset of `params` a stage over `unit_range` needs (a dict slice)."""
    if cfg is None:
        # Unit names are recoverable from the dict itself: embed, attn_i/mlp_i, head.
        layer = ("block",) if any(k.startswith("block_") for k in params) else ("attn", "mlp")
        num_layers = sum(1 for k in params if k.startswith(f"{layer[0]}_"))
        names = ["embed"] + [f"{k}_{i}" for i in range(num_layers) for k in layer] + ["head"]
        start, end = int(unit_range[0]), int(unit_range[1])
        if not 0 <= start < end <= len(names):
            raise ModelConfigError(f"unit range [{start}, {end}) outside the {len(names)} units")
    else:
        start, end = check_unit_range(cfg, unit_range)
        names = unit_names(cfg)
    missing = [n for n in names[start:end] if n not in params]
    if missing:
        raise ModelConfigError(f"params lack unit(s) {', '.join(missing)}")
    return {n: params[n] for n in names[start:end]}
