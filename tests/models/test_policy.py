"""Op vocabulary, presets, and policy resolution/lowering."""
import jax
import jax.numpy as jnp
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
    none = resolve_policy("none", family)
    assert not none.recompute and not none.offload
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


def _saved_and_offloaded(policy, ops):
    """Run a toy function whose i-th value (shape (i+1,)) is named ops[i] and read by
    the backward; the residual shapes then show which names the policy kept."""
    from jax.ad_checkpoint import checkpoint_name

    def f(xs):
        return sum(jnp.sum(checkpoint_name(jnp.sin(x), op) ** 2) for x, op in zip(xs, ops))

    xs = [jax.ShapeDtypeStruct((i + 1,), jnp.float32) for i in range(len(ops))]
    closed = jax.make_jaxpr(lambda xs: jax.tree.leaves(
        jax.vjp(jax.checkpoint(f, policy=policy.to_jax()), xs)[1]))(xs)
    inputs = set(closed.jaxpr.invars)
    saved, offloaded = set(), set()
    for v in closed.jaxpr.outvars:
        if v in inputs:
            continue
        host = getattr(v.aval, "memory_space", None) == jax.memory.Space.Host
        (offloaded if host else saved).add(ops[v.aval.shape[0] - 1])
    return saved, offloaded


@pytest.mark.parametrize("family", ["llama", "gpt"])
def test_lowering_to_jax_policies_keeps_exactly_the_saved_names(family):
    ops = models.ops_for(family)
    assert resolve_policy("full", family).to_jax() is jax.checkpoint_policies.nothing_saveable
    for spec, offload in [("none", ()), ("selective", ()), ("cmb", ()), ("full", ()),
                          ("mlp_act,attn_norm", ("attn_core", "logits"))]:
        pol = resolve_policy(spec, family, offload=offload)
        saved, offloaded = _saved_and_offloaded(pol, ops)
        assert saved == set(ops) - pol.recompute - pol.offload == pol.saved, spec
        assert offloaded == set(offload), spec


def test_direct_construction_is_validated():
    with pytest.raises(ModelConfigError, match="unknown op"):
        RecomputePolicy(recompute=frozenset({"nope"}))
    with pytest.raises(ModelConfigError, match="set of op names"):
        RecomputePolicy(recompute="q")
    p = RecomputePolicy(recompute={"q"}, name="mine")
    assert isinstance(p.recompute, frozenset) and (p.recompute or p.offload)
    assert p.to_json() == {"name": "mine", "recompute": ["q"], "offload": []}


@pytest.mark.parametrize("spec, message", [
    ("mlp_gate,,mlp_up", "has an empty item"), ("mlp_gate,", "has an empty item"), (" ", "names no op"),
    (["mlp_gate", ""], "names no op"), ([3], "must be op or preset names"), (None, "must be op or preset names"),
])
def test_an_offload_set_has_no_empty_item(spec, message):
    with pytest.raises(ModelConfigError, match=message):
        resolve_policy("none", "llama", offload=spec)


def test_offload_names_keep_presets_and_ops_as_given():
    assert models.offload_names(" mlp_gate , cmb") == ["mlp_gate", "cmb"]
    assert models.offload_names(["mlp_gate,mlp_up", "q"]) == ["mlp_gate", "mlp_up", "q"]
    assert models.offload_names(()) == []
    assert resolve_policy("none", "llama", offload=["mlp"]).offload == resolve_policy("mlp", "llama").recompute


def test_resolving_a_policy_starts_no_jax():
    import subprocess
    import sys
    code = ("import sys, models; models.resolve_policy('cmb', 'llama', offload='mlp_gate'); "
            "print('jax' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "False"
