"""The model registry: families (units, op vocabulary, presets) and configs by name,
the user-module loader, and a family of one's own (examples/geglu.py) working where
llama and gpt do: policies, model-info, params, the whole-model loss."""
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import models
from models import ModelConfigError
from models.registry import load_model_module, register_family

ROOT = Path(__file__).resolve().parents[2]
GEGLU = ROOT / "examples" / "geglu.py"
UNITS = {k: f"models.llama:{c}" for k, c in
         (("embed", "LlamaEmbed"), ("attn", "LlamaAttention"), ("mlp", "LlamaMlp"))} | {"head": "models.layers:Head"}
OPS = {"embed": ["e"], "attn": ["a1", "a2"], "mlp": ["m1"], "head": ["h"]}


def test_llama_and_gpt_are_registrations():
    assert models.family_names()[:2] == ("llama", "gpt")
    assert models.ops_for("llama") == models.LLAMA_OPS and models.ops_for("gpt") == models.GPT_OPS
    assert models.preset_names("gpt") == ("none", "full", "selective", "mlp", "cmb")
    assert models.op_unit_kind("llama", "q_rope") == "attn" and models.op_unit_kind("gpt", "logits") == "head"
    # other tests in this process may have registered families of their own (examples)
    assert set(models.all_ops()) == {o for f in models.family_names() for o in models.ops_for(f)}
    assert set(models.LLAMA_OPS) | set(models.GPT_OPS) <= set(models.all_ops())


def test_a_family_registers_its_vocabulary_and_presets(model_registry):
    fam = register_family("toy", units=UNITS, ops=OPS, presets={"cheap": ["a1", "m1"]})
    assert fam.ops == ("e", "a1", "a2", "m1", "h") and models.unit_ops("toy", "attn") == ("a1", "a2")
    assert models.preset_names("toy") == ("none", "full", "cheap")
    assert models.preset_ops("full", "toy") == frozenset(fam.ops)
    pol = models.resolve_policy("cheap", "toy")
    assert pol.recompute == {"a1", "m1"} and pol.name == "cheap"
    assert models.resolve_policy("a2", "toy").name == "a2"
    assert "a1" in models.all_ops()
    with pytest.raises(ModelConfigError, match="unknown policy or op name 'q' for toy"):
        models.resolve_policy("q", "toy")


@pytest.mark.parametrize("kwargs,message", [
    (dict(ops={**OPS, "mlp": ["a1"]}), "op 'a1' is listed twice"),
    (dict(ops={k: v for k, v in OPS.items() if k != "head"}), "ops must map each unit kind"),
    (dict(units={**UNITS, "head": 3}), r"units\['head'\] must be a module class"),
    (dict(presets={"full": ["a1"]}), "preset name 'full' is taken"),
    (dict(presets={"x": ["zz"]}), "preset 'x' names unknown op"),
    (dict(ops={**OPS, "head": ["full"]}), "op names must be non-empty strings other than 'full'"),
])
def test_a_bad_family_is_one_clear_error(model_registry, kwargs, message):
    with pytest.raises(ModelConfigError, match=message):
        register_family("bad", **{"units": UNITS, "ops": OPS, **kwargs})


def test_redefining_a_family_or_config_needs_replace(model_registry):
    register_family("toy", units=UNITS, ops=OPS)
    register_family("toy", units=UNITS, ops=OPS)          # the same definition again: fine
    with pytest.raises(ModelConfigError, match="already registered"):
        register_family("toy", units=UNITS, ops={**OPS, "head": ["h2"]})
    register_family("toy", units=UNITS, ops={**OPS, "head": ["h2"]}, replace=True)
    cfg = models.get_config("llama2-tiny").replace(name="mine")
    models.register_config(cfg)
    assert models.get_config("mine") is cfg
    with pytest.raises(ModelConfigError, match="already registered"):
        models.register_config(cfg.replace(hidden=32))


def test_configs_name_only_registered_families():
    with pytest.raises(ModelConfigError, match="family must be one of llama, gpt.*--model-module"):
        models.get_config("llama2-tiny", family="mystery")
    with pytest.raises(ModelConfigError, match="unknown model 'nope'.*--model-module"):
        models.get_config("nope")


def test_a_module_loads_by_path_or_name_once(model_registry, tmp_path, monkeypatch):
    load_model_module(str(GEGLU))
    assert "geglu-tiny" in models.CONFIGS and "geglu" in models.family_names()
    load_model_module(str(GEGLU))               # twice: the module is not run again
    (tmp_path / "my_models.py").write_text(
        "import models\nmodels.register_config(models.get_config('llama2-tiny').replace(name='llama-mine'))\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    load_model_module("my_models")              # a dotted name, found beside the user
    assert models.get_config("llama-mine").hidden == 64


@pytest.mark.parametrize("text,message", [
    (None, "model module {p}: no such file"),
    ("def f(:\n", "model module {p}: syntax error at line 1"),
    ("import no_such_package_xyz\n", "model module {p}: cannot import it"),
    ("raise RuntimeError('boom')\n", "model module {p} failed while importing: RuntimeError: boom"),
])
def test_a_bad_module_is_one_line_naming_it(tmp_path, text, message):
    path = tmp_path / "user_models.py"
    if text is not None:
        path.write_text(text)
    with pytest.raises(ModelConfigError) as err:
        load_model_module(str(path))
    assert str(err.value).startswith(message.format(p=path)) and "\n" not in str(err.value)
    with pytest.raises(ModelConfigError, match="model module no_such_module_xyz: cannot import it"):
        load_model_module("no_such_module_xyz")


@pytest.fixture
def geglu(model_registry):
    load_model_module(str(GEGLU))
    return models.get_config("geglu-tiny", num_layers=2)


def test_a_family_of_ones_own_runs_everywhere_llama_does(geglu):
    cfg = geglu
    assert not set(models.ops_for("geglu")) & (set(models.LLAMA_OPS) | set(models.GPT_OPS))
    params = models.init_params(cfg, seed=0)
    tokens = jnp.asarray(np.random.default_rng(0).integers(0, cfg.vocab_size, (2, 16)), jnp.int32)
    losses = [float(models.model_loss(cfg, params, tokens, tokens, p)) for p in models.preset_names("geglu")]
    np.testing.assert_allclose(losses, losses[0], rtol=1e-6)         # a policy never changes the math
    grads = [jax.grad(lambda q, p=p: models.model_loss(cfg, q, tokens, tokens, p))(params)
             for p in ("none", "cmb", "full")]
    for g in grads[1:]:
        jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7), g, grads[0])
    info = models.model_info(cfg, 16, 2)
    assert info["family"] == "geglu" and list(info["policies"]) == ["none", "full", "selective", "cmb", "ffn"]
    assert list(info["unit_kinds"]["mlp"]["ops"]) == list(models.unit_ops("geglu", "mlp"))
    none, cmb = (info["policies"][p]["residual_bytes_per_layer"] for p in ("none", "cmb"))
    assert 0 < cmb < none
