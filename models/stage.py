"""Stages: pure functions over a contiguous unit range.

`stage.apply(params_subset, x, targets=None)`:
  first stage  takes int32 tokens [B,T]; middle stages take and return the hidden
  state [B,T,D] in compute dtype; the stage holding `head` returns the scalar mean
  cross-entropy over its micro-batch (targets [B,T] int32).
Each unit runs under `jax.checkpoint(policy.to_jax())`, so the residuals of
`jax.vjp(stage.apply, ...)` are exactly what the policy keeps; parameters enter
the checkpointed function as arguments and are never copied into residuals.
Under a layer-granular policy (`layer`) each attn_i + mlp_i pair of the stage runs
as ONE checkpointed function saving nothing (`layer_apply_fn`):

    attn_0 mlp_0 attn_1 mlp_1 ...      unit policies: one checkpoint per box
    [    ] [   ] [    ] [   ]
    [   layer_0  ] [  layer_1  ]       `layer`: one per layer, keeps its input only
"""
from __future__ import annotations

from dataclasses import dataclass, field

import jax
import jax.numpy as jnp
from flax import nnx

from models.aux_loss import split_output, with_aux
from models.config import ModelConfig, ModelConfigError
from models.policy import RecomputePolicy, resolve_policy
from models.registry import format_units
from models.units import check_unit_range, unit_graphdef, unit_kind, unit_names


def _as_policy(policy, cfg: ModelConfig) -> RecomputePolicy:
    return resolve_policy("none" if policy is None else policy, cfg.family)


def unit_apply_fn(cfg: ModelConfig, kind: str, policy=None):
    """The checkpointed pure function of one unit kind:
    embed/attn/mlp: (unit_params, x) -> y;  head: (unit_params, x, targets[, table]) -> loss."""
    graphdef = unit_graphdef(cfg, kind)
    pol = _as_policy(policy, cfg)

    if kind == "head":
        def run(unit_params, x, targets, tied_table=None):
            return nnx.merge(graphdef, unit_params)(x, targets, tied_table)
    else:
        def run(unit_params, x):
            return nnx.merge(graphdef, unit_params)(x)
    return jax.checkpoint(run, policy=pol.to_jax())


def layer_apply_fn(cfg: ModelConfig):
    """One transformer layer (attention then MLP) under ONE `jax.checkpoint` that
    saves nothing: (attn_params, mlp_params, x) -> y; its backward keeps only x."""
    attn, mlp = unit_graphdef(cfg, "attn"), unit_graphdef(cfg, "mlp")

    def run(attn_params, mlp_params, x):
        h, aux_a = split_output(nnx.merge(attn, attn_params)(x), "attn")
        y, aux_m = split_output(nnx.merge(mlp, mlp_params)(h), "mlp")
        auxes = [a for a in (aux_a, aux_m) if a is not None]
        return (y, sum(auxes)) if auxes else y
    return jax.checkpoint(run, policy=jax.checkpoint_policies.nothing_saveable)


@dataclass(frozen=True)
class Stage:
    cfg: ModelConfig
    unit_range: tuple[int, int]
    policy: RecomputePolicy
    aux_weight: float = 1.0       # the micro-batch's share of the loss: units' aux losses (models.aux_loss)
    _fns: dict = field(default=None, repr=False, compare=False)

    def __post_init__(self):
        object.__setattr__(self, "unit_range", check_unit_range(self.cfg, self.unit_range))
        if self.cfg.tie_embeddings and (self.is_first != self.is_last):
            raise ModelConfigError(
                f"{self.cfg.name} ties its embeddings, so embed and head must share one stage; "
                f"unit range {format_units(self.unit_range)} splits them (use tie_embeddings=False "
                "for pipelines)")
        fns = {k: unit_apply_fn(self.cfg, k, self.policy)
               for k in {unit_kind(n) for n in self.unit_names}}
        if self.policy.layer:
            fns["layer"] = layer_apply_fn(self.cfg)
        object.__setattr__(self, "_fns", fns)

    @property
    def unit_names(self) -> list[str]:
        return unit_names(self.cfg)[self.unit_range[0]:self.unit_range[1]]

    @property
    def is_first(self) -> bool:
        return self.unit_range[0] == 0

    @property
    def is_last(self) -> bool:
        return self.unit_range[1] == self.cfg.num_units

    def input_spec(self, micro_batch: int, seq_len: int) -> jax.ShapeDtypeStruct:
        """Shape/dtype of what `apply` takes as x."""
        if self.is_first:
            return jax.ShapeDtypeStruct((micro_batch, seq_len), jnp.int32)
        return jax.ShapeDtypeStruct((micro_batch, seq_len, self.cfg.hidden),
                                    jnp.dtype(self.cfg.compute_dtype))

    def output_spec(self, micro_batch: int, seq_len: int) -> jax.ShapeDtypeStruct:
        """Shape/dtype of what `apply` returns (a float32 scalar on the last stage)."""
        if self.is_last:
            return jax.ShapeDtypeStruct((), jnp.float32)
        return jax.ShapeDtypeStruct((micro_batch, seq_len, self.cfg.hidden),
                                    jnp.dtype(self.cfg.compute_dtype))

    def apply(self, params: dict, x, targets=None):
        """Run the stage's units in order. Pure; jit/vjp it as you like."""
        missing = [n for n in self.unit_names if n not in params]
        if missing:
            raise ModelConfigError(f"stage params lack unit(s) {', '.join(missing)}")
        if self.is_last and targets is None:
            raise ModelConfigError("the stage holding 'head' needs targets [B,T] to compute the loss")
        _check_input(self, x)
        names = self.unit_names
        i = 0
        while i < len(names):
            name, kind = names[i], unit_kind(names[i])
            i += 1
            if self.policy.layer and kind == "attn" and i < len(names) and unit_kind(names[i]) == "mlp":
                out = self._fns["layer"](params[name], params[names[i]], x)
                i += 1
            elif kind == "head":
                table = params["embed"]["tokens"]["embedding"] if self.cfg.tie_embeddings else None
                return self._fns["head"](params["head"], x, targets, table)
            else:
                out = self._fns[kind](params[name], x)
            x = with_aux(*split_output(out, name), self.aux_weight)
        return x


def _check_input(stage: Stage, x) -> None:
    want_ndim = 2 if stage.is_first else 3
    if getattr(x, "ndim", None) != want_ndim:
        what = "int tokens [B,T]" if stage.is_first else "hidden [B,T,D]"
        raise ModelConfigError(
            f"stage {format_units(stage.unit_range)} takes {what}, got shape {getattr(x, 'shape', None)}")
    if stage.is_first and not jnp.issubdtype(x.dtype, jnp.integer):
        raise ModelConfigError(f"the first stage takes integer tokens, got {x.dtype}")
    if not stage.is_first and x.shape[-1] != stage.cfg.hidden:
        raise ModelConfigError(f"hidden size {x.shape[-1]} != {stage.cfg.hidden}")


def build_stage(cfg: ModelConfig, unit_range, policy=None, aux_weight: float = 1.0) -> Stage:
    """A stage over the half-open `unit_range`; `policy` is a RecomputePolicy or
    anything `resolve_policy` takes (default 'none'); `aux_weight`: the weight of
    its units' auxiliary losses (1/m in a pipeline of m micro-batches)."""
    return Stage(cfg, tuple(unit_range) if not isinstance(unit_range, tuple) else unit_range,
                 _as_policy(policy, cfg), float(aux_weight))


def model_loss(cfg: ModelConfig, params: dict, tokens, targets, policy=None):
    """The whole model as one function: the reference for pipeline engines."""
    return build_stage(cfg, (0, cfg.num_units), policy).apply(params, tokens, targets)


def model_logits(cfg: ModelConfig, params: dict, tokens):
    """Logits [B,T,V] of the whole model (no loss, no checkpointing): for tests/eval."""
    x = tokens
    for name in unit_names(cfg):
        kind = unit_kind(name)
        module = nnx.merge(unit_graphdef(cfg, kind), params[name])
        if kind == "head":
            table = params["embed"]["tokens"]["embedding"] if cfg.tie_embeddings else None
            return module.logits(x, table)
        x, _ = split_output(module(x), name)
    raise AssertionError("unreachable: the last unit is the head")
