"""Auxiliary losses (MoE load balancing, router z-loss): a unit's module may return
`(y_BxTxD, aux)` instead of `y_BxTxD`, `aux` a scalar added to the training loss.

A pipeline cannot add a loss computed on stage 2 to the loss the last stage
returns without shipping it along; what training needs is its gradient. So each
unit's `aux` is attached to its output by `attach_aux_loss`: the identity forward,
and a backward that gives `aux` the cotangent `weight`, the share the micro-batch
has in the iteration's loss (1/m in a pipeline of m micro-batches, 1 for the whole
batch at once), whatever arrives from downstream. This is Megatron's
MoEAuxLossAutoScaler. The gradient of every parameter is then that of
`mean over micro-batches of (head loss + sum of aux)`.

The contract that makes micro-batching exact: like the cross-entropy, `aux` must be
a MEAN over the micro-batch's rows (sequences) of a per-row quantity, so that the
mean of m micro-batches' aux equals the whole batch's (a load-balancing loss
computed per sequence, as DeepSeek's sequence-wise balance loss is; one over all
tokens of a batch would depend on how the batch is cut). The reported loss is the
head's: aux values act through their gradients only.
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from models.errors import ModelConfigError


@functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
def attach_aux_loss(y, aux, weight: float):
    """`y`, with `aux` (a float32 scalar) joining the loss at `weight`."""
    return y


def _fwd(y, aux, weight):
    return y, None


def _bwd(weight, _, dy):
    return dy, jnp.asarray(weight, jnp.float32)


attach_aux_loss.defvjp(_fwd, _bwd)


def split_output(out, where: str):
    """(y, aux or None) of what a unit module returned: y, or (y, aux)."""
    if not isinstance(out, tuple):
        return out, None
    if len(out) != 2:
        raise ModelConfigError(f"{where} returned a tuple of {len(out)}; a unit returns y or (y, aux_loss)")
    y, aux = out
    if getattr(aux, "shape", None) != ():
        raise ModelConfigError(f"{where} returned an auxiliary loss of shape {getattr(aux, 'shape', None)}; "
                               "it must be a scalar (the mean over the micro-batch's rows)")
    return y, jnp.asarray(aux, jnp.float32)


def with_aux(y, aux, weight: float):
    """y with aux attached (y unchanged when there is none)."""
    return y if aux is None else attach_aux_loss(y, aux, float(weight))
