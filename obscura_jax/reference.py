"""The numerical reference: the same model trained unpipelined on one device, the
whole batch as one, with the same optimizer. Every schedule, policy and swap
setting of the engine must reproduce its losses and parameters."""
from __future__ import annotations

import jax
import numpy as np
import optax

import models


def reference_train(cfg, params: dict, batches, optimizer, policy=None, device=None):
    """batches: iterable of (tokens [B,T], targets [B,T]) -> (losses per step, final params)."""
    device = device or jax.devices()[0]
    params = jax.device_put(params, device)
    opt_state = jax.jit(optimizer.init)(params)

    @jax.jit
    def step(params, opt_state, tokens, targets):
        loss, grads = jax.value_and_grad(
            lambda p: models.model_loss(cfg, p, tokens, targets, policy))(params)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    losses = []
    for tokens, targets in batches:
        params, opt_state, loss = step(params, opt_state, jax.device_put(np.asarray(tokens), device),
                                       jax.device_put(np.asarray(targets), device))
        losses.append(float(loss))
    return losses, params


def compare_params(a: dict, b: dict) -> float:
    """Largest |a - b| / (|b| + 1e-6) over all leaves (both whole-model dicts)."""
    worst = 0.0
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
        worst = max(worst, float(np.max(np.abs(x - y) / (np.abs(y) + 1e-6))))
    return worst
