"""The numerical reference: the same model trained unpipelined on one device, the
whole batch as one, with the same optimizer. Every schedule, policy and swap
setting of the engine must reproduce its losses and parameters."""
from __future__ import annotations

import functools

import jax
import numpy as np
import optax

import models


def reference_train(cfg, params: dict, batches, optimizer, policy=None, device=None, first_grads=None):
    """batches: iterable of (tokens [B,T], targets [B,T]) -> (losses per step, final params).
    If `first_grads` is a list, the first step's gradients are appended to it."""
    device = device or jax.devices()[0]
    params = jax.device_put(params, device)
    opt_state = jax.jit(optimizer.init)(params)
    try:
        step = _train_step(cfg, optimizer, policy)
    except TypeError:       # an unhashable policy: a step of its own
        step = _train_step.__wrapped__(cfg, optimizer, policy)
    losses = []
    for tokens, targets in batches:
        params, opt_state, loss, grads = step(params, opt_state, jax.device_put(np.asarray(tokens), device),
                                              jax.device_put(np.asarray(targets), device))
        if first_grads is not None and not losses:
            first_grads.append(jax.device_get(grads))
        losses.append(float(loss))
    return losses, params


@functools.lru_cache(maxsize=16)
def _train_step(cfg, optimizer, policy):
    """One jitted step per (model, optimizer, policy), kept for the process: checking
    several schedules of one model in one process (`compare`, the API, the tests)
    traces and compiles the reference once. `optimizer` is keyed by identity
    (executor.make_optimizer returns one object per setting)."""
    @jax.jit
    def step(params, opt_state, tokens, targets):
        loss, grads = jax.value_and_grad(
            lambda p: models.model_loss(cfg, p, tokens, targets, policy))(params)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss, grads
    return step
