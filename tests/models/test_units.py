"""Partition units, the even split, params (real, abstract, subsets) and Stage checks."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, strategies as st

import models
from models import ModelConfigError


def test_unit_names():
    cfg = models.get_config("llama2-tiny", num_layers=2)
    assert models.unit_names(cfg) == ["embed", "attn_0", "mlp_0", "attn_1", "mlp_1", "head"]
    assert [models.unit_kind(n) for n in models.unit_names(cfg)] == \
        ["embed", "attn", "mlp", "attn", "mlp", "head"]
    with pytest.raises(ModelConfigError, match="unknown unit"):
        models.unit_kind("ffn_3")


def test_even_partition_matches_the_paper():
    # Llama-2 28B on p = 8: 88 layers -> 176 inner units, 22 per stage, +1 first and last
    assert [e - s for s, e in models.even_partition(178, 8)] == [23] + [22] * 6 + [23]
    assert models.even_partition(10, 1) == [(0, 10)]
    assert models.even_partition(10, 10) == [(i, i + 1) for i in range(10)]


@given(num_units=st.integers(2, 200), data=st.data())
def test_even_partition_properties(num_units, data):
    p = data.draw(st.integers(1, num_units))
    ranges = models.even_partition(num_units, p)
    assert len(ranges) == p and ranges[0][0] == 0 and ranges[-1][1] == num_units
    assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))
    sizes = [e - s for s, e in ranges]
    assert min(sizes) >= 1
    inner = [sizes[0] - 1] + sizes[1:-1] + [sizes[-1] - 1] if p > 1 else [sizes[0] - 2]
    assert max(inner) - min(inner) <= 1  # the 2L inner units are spread evenly


@pytest.mark.parametrize("units,stages", [(10, 11), (10, 0), (1, 1), (10, -2)])
def test_even_partition_rejects_impossible_splits(units, stages):
    with pytest.raises(ModelConfigError):
        models.even_partition(units, stages)


def test_params_dict_is_keyed_by_unit_and_matches_abstract():
    cfg = models.get_config("gpt3-tiny", num_layers=2)
    real = models.init_params(cfg, seed=3)
    abstract = models.abstract_params(cfg)
    assert list(real) == models.unit_names(cfg) == list(abstract)
    assert jax.tree.structure(real) == jax.tree.structure(abstract)
    for r, a in zip(jax.tree.leaves(real), jax.tree.leaves(abstract)):
        assert isinstance(a, jax.ShapeDtypeStruct) and (r.shape, r.dtype) == (a.shape, a.dtype)


def test_init_is_seeded_per_unit_so_subsets_match_the_whole():
    cfg = models.get_config("llama2-tiny", num_layers=2)
    whole = models.init_params(cfg, seed=5)
    part = models.init_params(cfg, seed=5, unit_range=(2, 4))
    assert list(part) == ["mlp_0", "attn_1"]
    for a, b in zip(jax.tree.leaves(part), jax.tree.leaves(models.stage_params(whole, (2, 4)))):
        np.testing.assert_array_equal(a, b)
    other = models.init_params(cfg, seed=6, unit_range=(2, 3))
    assert not np.array_equal(other["mlp_0"]["w_up"]["kernel"], whole["mlp_0"]["w_up"]["kernel"])


def test_big_model_abstract_params_allocate_nothing():
    cfg = models.get_config("llama2-28b")
    abstract = models.abstract_params(cfg)
    assert all(isinstance(x, jax.ShapeDtypeStruct) for x in jax.tree.leaves(abstract))
    assert sum(x.size for x in jax.tree.leaves(abstract)) == models.count_params(cfg)


def test_stage_attributes_and_specs():
    cfg = models.get_config("llama2-tiny", num_layers=2)
    first, mid, last = (models.build_stage(cfg, r, "cmb") for r in models.even_partition(6, 3))
    assert first.is_first and not first.is_last and first.unit_names == ["embed", "attn_0"]
    assert not mid.is_first and not mid.is_last and last.is_last
    assert first.input_spec(2, 8) == jax.ShapeDtypeStruct((2, 8), jnp.int32)
    assert mid.input_spec(2, 8).shape == (2, 8, 64) and last.output_spec(2, 8).shape == ()
    assert first.policy.name == "cmb"
    out = jax.eval_shape(first.apply, models.abstract_params(cfg), first.input_spec(2, 8))
    assert out == first.output_spec(2, 8)


def test_stage_input_errors():
    cfg = models.get_config("llama2-tiny", num_layers=2)
    params = models.abstract_params(cfg)
    tokens = jax.ShapeDtypeStruct((2, 8), jnp.int32)
    with pytest.raises(ModelConfigError, match="needs targets"):
        jax.eval_shape(models.build_stage(cfg, (4, 6)).apply, params,
                       jax.ShapeDtypeStruct((2, 8, 64), jnp.float32))
    with pytest.raises(ModelConfigError, match="takes hidden"):
        jax.eval_shape(models.build_stage(cfg, (1, 3)).apply, params, tokens)
    with pytest.raises(ModelConfigError, match="lack unit"):
        models.build_stage(cfg, (0, 2)).apply({"embed": params["embed"]}, tokens)
    with pytest.raises(ModelConfigError, match="exceeds max_seq_len"):
        jax.eval_shape(models.build_stage(cfg, (0, 1)).apply, params,
                       jax.ShapeDtypeStruct((1, cfg.max_seq_len + 1), jnp.int32))
    for bad in [(3, 3), (0, 7), (-1, 2), (1,)]:
        with pytest.raises(ModelConfigError, match="unit range"):
            models.build_stage(cfg, bad)


def test_tied_embeddings_work_on_one_stage_and_refuse_a_split():
    cfg = models.get_config("gpt3-tiny", num_layers=1, tie_embeddings=True)
    params = models.init_params(cfg)
    assert "w_out" not in params["head"]
    tokens = jnp.arange(8, dtype=jnp.int32)[None]
    logits = jax.jit(lambda p: models.model_logits(cfg, p, tokens))(params)
    loss = jax.jit(lambda p: models.model_loss(cfg, p, tokens, tokens))(params)
    want = -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), tokens[..., None], -1))
    np.testing.assert_allclose(loss, want, rtol=1e-5)
    with pytest.raises(ModelConfigError, match="ties its embeddings"):
        models.build_stage(cfg, (0, 2))
