"""Shared tiny-model fixtures: perturbed params and a small byte-level batch."""
import jax.numpy as jnp
import numpy as np
import pytest

import models
from tests.models.plain_reference import perturbed_params

BATCH, SEQ = 2, 16


@pytest.fixture(scope="session", params=["llama2-tiny", "gpt3-tiny"])
def tiny(request):
    """(cfg, params, tokens, targets) for one tiny family, cut to 2 layers (6 units):
    layers are identical, and compile time is what these tests spend."""
    cfg = models.get_config(request.param, num_layers=2)
    params = perturbed_params(models.init_params(cfg, seed=0))
    rng = np.random.default_rng(1)
    tokens, targets = (jnp.asarray(rng.integers(0, cfg.vocab_size, (BATCH, SEQ)), jnp.int32)
                       for _ in range(2))
    return cfg, params, tokens, targets
