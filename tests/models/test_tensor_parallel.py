"""models.tensor_parallel: the registry's Megatron layout as PartitionSpecs, and the
one-line refusals of a model that cannot shard T ways."""
import dataclasses

import jax
import pytest
from jax.sharding import PartitionSpec as P

import models
from models.errors import ModelConfigError
from models.tensor_parallel import check_tensor_parallel, tensor_specs


def _specs(name: str, tensor: int) -> dict:
    cfg = models.get_config(name)
    return tensor_specs(cfg, models.abstract_params(cfg), tensor)


def test_llama_is_megatron_column_then_row():
    s = _specs("llama2-tiny", 2)
    assert s["attn_0"]["wq"]["kernel"] == P(None, "tensor") and s["attn_0"]["wo"]["kernel"] == P("tensor", None)
    assert s["attn_0"]["wk"]["kernel"] == P(None, "tensor")          # 2 KV heads over 2: split
    assert s["mlp_1"]["w_gate"]["kernel"] == P(None, "tensor") and s["mlp_1"]["w_down"]["kernel"] == P("tensor", None)
    assert s["head"]["w_out"]["kernel"] == P(None, "tensor")         # the vocabulary
    assert s["attn_0"]["norm"]["scale"] == P() and s["embed"]["tokens"]["embedding"] == P()


def test_kv_heads_are_replicated_when_t_is_a_multiple_of_them():
    s = _specs("llama2-tiny", 4)                                     # 4 query heads, 2 KV heads
    assert s["attn_0"]["wq"]["kernel"] == P(None, "tensor")
    assert s["attn_0"]["wk"]["kernel"] == P() and s["attn_0"]["wv"]["kernel"] == P()
    check_tensor_parallel(models.get_config("llama2-tiny"), 4)


def test_gpt_biases_follow_their_layer():
    s = _specs("gpt3-tiny", 2)
    assert s["attn_0"]["w_qkv"]["bias"] == P("tensor") and s["attn_0"]["wo"]["bias"] == P()
    assert s["mlp_0"]["w_up"]["bias"] == P("tensor") and s["mlp_0"]["w_down"]["bias"] == P()


def test_tensor_1_replicates_everything():
    assert all(sp == P() for sp in jax.tree.leaves(_specs("gpt3-tiny", 1), is_leaf=lambda x: isinstance(x, P)))


@pytest.mark.parametrize("overrides, tensor, needle", [
    ({}, 3, "attention heads (4) not divisible by tensor parallelism 3"),
    ({}, 8, "attention heads (4) not divisible by tensor parallelism 8"),
    ({"num_heads": 6, "num_kv_heads": 3, "hidden": 48}, 2, "KV heads (3) neither divide nor are divisible"),
    ({"ffn_hidden": 170}, 4, "FFN width (170) not divisible by tensor parallelism 4"),
    ({"vocab_size": 250}, 4, "head/w_out/kernel dim 1 (250) not divisible by tensor parallelism 4"),
])
def test_a_model_that_cannot_shard_is_one_line(overrides, tensor, needle):
    cfg = dataclasses.replace(models.get_config("llama2-tiny"), **overrides)
    with pytest.raises(ModelConfigError, match=None) as e:
        check_tensor_parallel(cfg, tensor)
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_a_family_without_a_layout_trains_only_at_t_1():
    fam = models.get_family("llama")
    models.register_family("llama-no-tp", units=dict(fam.units), ops=dict(fam.kind_ops))
    cfg = dataclasses.replace(models.get_config("llama2-tiny"), name="x", family="llama-no-tp")
    check_tensor_parallel(cfg, 1)
    with pytest.raises(ModelConfigError, match="declares no tensor-parallel layout"):
        check_tensor_parallel(cfg, 2)


def test_registry_refuses_an_unknown_role():
    fam = models.get_family("llama")
    with pytest.raises(ModelConfigError, match="roles are column, row, kv_column"):
        models.register_family("llama-bad-tp", units=dict(fam.units), ops=dict(fam.kind_ops),
                               tensor_parallel={"attn": {"wq/kernel": "diagonal"}})
