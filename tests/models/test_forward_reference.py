"""The Flax units against the independent plain-jnp reference (fp32)."""
import jax
import numpy as np

import models
from tests.models.plain_reference import plain_logits, plain_loss


def test_logits_match_plain_reference(tiny):
    cfg, params, tokens, _ = tiny
    got = jax.jit(lambda p, t: models.model_logits(cfg, p, t))(params, tokens)
    want = jax.jit(lambda p, t: plain_logits(cfg, p, t))(params, tokens)
    assert got.shape == (*tokens.shape, cfg.vocab_size)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert float(np.std(np.asarray(want))) > 0.1  # not a degenerate all-equal output


def test_loss_matches_plain_reference(tiny):
    cfg, params, tokens, targets = tiny
    got = jax.jit(lambda p: models.model_loss(cfg, p, tokens, targets))(params)
    want = jax.jit(lambda p: plain_loss(cfg, p, tokens, targets))(params)
    np.testing.assert_allclose(got, want, rtol=1e-5)


def test_causality_future_tokens_do_not_change_past_logits(tiny):
    cfg, params, tokens, _ = tiny
    changed = tokens.at[:, -1].set((tokens[:, -1] + 1) % cfg.vocab_size)
    f = jax.jit(lambda t: models.model_logits(cfg, params, t))
    a, b = f(tokens), f(changed)
    np.testing.assert_allclose(a[:, :-1], b[:, :-1], rtol=1e-6, atol=1e-6)
    assert not np.allclose(a[:, -1], b[:, -1])


def test_gqa_config_uses_fewer_kv_heads():
    cfg = models.get_config("llama2-tiny")
    p = models.abstract_params(cfg)["attn_0"]
    assert cfg.num_kv_heads < cfg.num_heads
    assert p["wk"]["kernel"].shape == (cfg.hidden, cfg.num_kv_heads * cfg.head_dim)
