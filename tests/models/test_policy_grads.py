"""Recompute and offload policies never change the math: loss and every gradient
equal the plain (un-checkpointed, independent) reference in fp32."""
import jax
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import models
from tests.models.plain_reference import plain_loss
from tests.budget import examples

RTOL, ATOL = 1e-5, 1e-6

OFFLOAD_SETS = {  # (recompute spec, offload set) per family: offload beside recompute
    "llama": ("mlp_act,attn_norm", {"q_rope", "k_rope", "attn_core", "mlp_gate", "logits"}),
    "gpt": ("mlp_act,attn_norm", {"qkv", "mlp_up", "logits"}),
}


@pytest.fixture(scope="module")
def reference(tiny):
    cfg, params, tokens, targets = tiny
    loss, grads = jax.jit(jax.value_and_grad(
        lambda p: plain_loss(cfg, p, tokens, targets)))(params)
    return loss, grads


def _loss_and_grads(tiny, policy):
    cfg, params, tokens, targets = tiny
    return jax.jit(jax.value_and_grad(
        lambda p: models.model_loss(cfg, p, tokens, targets, policy)))(params)


def _assert_same(got, want):
    (loss, grads), (ref_loss, ref_grads) = got, want
    np.testing.assert_allclose(loss, ref_loss, rtol=RTOL)
    assert jax.tree.structure(grads) == jax.tree.structure(ref_grads)
    for path, g in jax.tree_util.tree_leaves_with_path(grads):
        r = ref_grads
        for key in path:
            r = r[key.key]
        np.testing.assert_allclose(g, r, rtol=RTOL, atol=ATOL, err_msg=jax.tree_util.keystr(path))


@pytest.mark.parametrize("preset", models.preset_names("llama"))
def test_presets_give_reference_loss_and_grads(tiny, reference, preset):
    _assert_same(_loss_and_grads(tiny, preset), reference)


@settings(max_examples=examples(2), deadline=None)
@given(data=st.data())
def test_random_op_sets_give_reference_loss_and_grads(tiny, reference, data):
    ops = models.ops_for(tiny[0].family)
    recompute = data.draw(st.sets(st.sampled_from(ops), min_size=1), label="recompute")
    _assert_same(_loss_and_grads(tiny, sorted(recompute)), reference)


def test_offload_sets_give_reference_loss_and_grads(tiny, reference):
    cfg = tiny[0]
    spec, offload = OFFLOAD_SETS[cfg.family]
    policy = models.resolve_policy(spec, cfg.family, offload=sorted(offload))
    assert policy.offload == frozenset(offload)
    _assert_same(_loss_and_grads(tiny, policy), reference)


def test_layer_policy_gives_reference_loss_and_grads(tiny, reference):
    policy = models.resolve_policy("layer", tiny[0].family)
    assert policy.layer and policy.recompute == frozenset(models.ops_for(tiny[0].family))
    _assert_same(_loss_and_grads(tiny, policy), reference)


def test_layer_policy_keeps_only_each_layers_input(tiny):
    """One checkpoint per layer: the backward of a 2-layer stage keeps its two layer
    inputs; `full` (one per unit) also keeps each MLP's input."""
    cfg, params, tokens, _ = tiny
    x = jax.numpy.ones(tokens.shape + (cfg.hidden,), cfg.compute_dtype)
    names = models.unit_names(cfg)[1:5]
    sub = {n: params[n] for n in names}

    def kept(policy):
        stage = models.build_stage(cfg, (1, 5), policy)
        _, pullback = jax.vjp(lambda h: stage.apply(sub, h), x)   # params closed over: constants
        leaves = {id(a): a for a in jax.tree.leaves(pullback) if getattr(a, "ndim", 0) == 3}
        return sum(a.nbytes for a in leaves.values() if a.shape == x.shape)
    assert kept("layer") == 2 * x.nbytes
    assert kept("full") == 4 * x.nbytes
