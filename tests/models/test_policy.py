"""Op vocabulary, presets, and policy resolution/lowering."""
import jax
import pytest

import models
from models import ModelConfigError, RecomputePolicy, resolve_policy


def test_vocabulary_matches_design():
    llama_core = ["attn_norm", "q", "k", "v", "q_rope", "k_rope", "attn_core", "attn_proj",
                  "attn_res", "mlp_norm", "mlp_gate", "mlp_up", "mlp_act", "mlp_mul", "mlp_down",
                  "mlp_res"]
    assert list(models.LLAMA_OPS) == ["embed", *llama_core, "final_norm", "logits"]
    assert "qkv" in models.GPT_OPS and "mlp_gate" not in models.GPT_OPS
    assert "mlp_mul" not in models.GPT_OPS
    for family in ("llama", "gpt"):
        ops = models.ops_for(family)
        by_kind = [o for k in models.UNIT_KINDS for o in models.unit_ops(family, k)]
        assert sorted(by_kind) == sorted(ops) and len(set(ops)) == len(ops)


def test_every_op_name_is_tagged_in_the_model():
    for name in ("llama2-tiny", "gpt3-tiny"):
        cfg = models.get_config(name, num_layers=1)
        jaxpr = str(jax.make_jaxpr(lambda p, t: models.model_loss(cfg, p, t, t))(
            models.abstract_params(cfg), jax.ShapeDtypeStruct((1, 8), "int32")))
        for op in models.ops_for(cfg.family):
            assert f"name={op}]" in jaxpr or f"name={op} " in jaxpr, (name, op)


@pytest.mark.parametrize("family", ["llama", "gpt"])
def test_presets(family):
    ops = set(models.ops_for(family))
    assert resolve_policy("none", family).recompute == frozenset()
    assert resolve_policy("none", family).is_none
    assert resolve_policy("full", family).recompute == ops
    assert resolve_policy("selective", family).recompute == {"attn_core"}
    assert resolve_policy("mlp", family).recompute == {o for o in ops if o.startswith("mlp_")}
    cmb = resolve_policy("cmb", family).recompute
    assert {"attn_norm", "mlp_norm", "final_norm", "mlp_act"} <= cmb
    assert ("mlp_mul" in cmb) == (family == "llama")


def test_specs_as_strings_lists_and_unions():
    p = resolve_policy("mlp_act, mlp_mul", "llama")
    assert p.recompute == {"mlp_act", "mlp_mul"} and p.name == "mlp_act,mlp_mul"
    p = resolve_policy(["selective", "mlp_gate"], "llama")
    assert p.recompute == {"attn_core", "mlp_gate"}
    assert resolve_policy(["attn_norm", "mlp_norm", "final_norm", "mlp_act", "mlp_mul"],
                          "llama").name == "cmb"
    p = resolve_policy("cmb", "llama", offload="mlp_gate,mlp_up")
    assert p.offload == {"mlp_gate", "mlp_up"} and p.name == "cmb+offload:mlp_gate,mlp_up"
    assert resolve_policy(p, "llama") == p


@pytest.mark.parametrize("spec,family,message", [
    ("mlp_gate", "gpt", "unknown policy or op name 'mlp_gate' for gpt; valid presets"),
    ("attn,foo", "llama", "valid ops: embed, attn_norm"),
    (["none", 3], "llama", "must be op or preset names"),
    ("none", "bert", "unknown model family"),
])
def test_unknown_names_list_the_valid_ones(spec, family, message):
    with pytest.raises(ModelConfigError, match=message):
        resolve_policy(spec, family)


def test_recompute_and_offload_must_not_overlap():
    with pytest.raises(ModelConfigError, match="both recomputed and offloaded"):
        resolve_policy("cmb", "llama", offload=["mlp_act"])
    with pytest.raises(ModelConfigError, match="unknown offload op"):
        resolve_policy("none", "llama", offload=["bogus"])


def test_lowering_to_jax_policies():
    cp = jax.checkpoint_policies
    assert resolve_policy("full", "llama").to_jax() is cp.nothing_saveable
    none = resolve_policy("none", "gpt").to_jax()
    assert none.__class__.__name__ == "SaveOnlyTheseNames"
    assert set(none.saveable_names) == set(models.GPT_OPS)
    sel = resolve_policy("selective", "gpt").to_jax()
    assert set(sel.saveable_names) == set(models.GPT_OPS) - {"attn_core"}
    off = resolve_policy("none", "llama", offload=["mlp_up"]).to_jax()
    assert callable(off) and off.__name__ == "policy"


def test_direct_construction_is_validated():
    with pytest.raises(ModelConfigError, match="unknown op"):
        RecomputePolicy(recompute=frozenset({"nope"}))
    with pytest.raises(ModelConfigError, match="set of op names"):
        RecomputePolicy(recompute="q")
    p = RecomputePolicy(recompute={"q"}, name="mine")
    assert isinstance(p.recompute, frozenset) and not p.is_none
    assert p.to_json() == {"name": "mine", "recompute": ["q"], "offload": []}
