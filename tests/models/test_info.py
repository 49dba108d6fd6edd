"""Measured residual bytes, per-op act bytes and model_info."""
import jax
import jax.numpy as jnp
import pytest

import models
from models.info import (layer_residual_bytes, model_info, op_act_bytes, unit_residual_bytes,
                         unit_residuals)

T, B = 32, 2


@pytest.fixture(scope="module", params=["llama2-tiny", "gpt3-tiny"])
def tiny_info(request):
    cfg = models.get_config(request.param)
    return cfg, model_info(cfg, T, B)


def test_residual_bytes_are_ordered(tiny_info):
    _, info = tiny_info
    r = {k: v["residual_bytes_per_layer"] for k, v in info["policies"].items()}
    assert r["none"] > r["cmb"] > r["full"] > 0
    assert r["mlp"] < r["none"] and r["selective"] < r["none"]


def test_full_keeps_only_the_unit_inputs(tiny_info):
    cfg, info = tiny_info
    hidden_bytes = B * T * cfg.hidden * 4  # fp32 tiny configs
    assert info["policies"]["full"]["residual_bytes_per_layer"] == 2 * hidden_bytes
    assert info["unit_kinds"]["embed"]["input_bytes"] == B * T * 4          # int32 tokens
    assert info["unit_kinds"]["head"]["input_bytes"] == hidden_bytes + B * T * 4  # + targets


def test_op_bytes_sum_to_the_measured_residual_of_every_preset(tiny_info):
    _, info = tiny_info
    for name, p in info["policies"].items():
        assert p["op_sum_bytes_per_layer"] == p["residual_bytes_per_layer"], name


def test_op_act_bytes_are_the_tensors_the_backward_reads():
    cfg = models.get_config("llama2-tiny")
    act = op_act_bytes(cfg, T, B)
    d = B * T * cfg.hidden * 4
    f = B * T * cfg.ffn_hidden * 4
    kv = d * cfg.num_kv_heads // cfg.num_heads
    assert act["attn_norm"] == act["q"] == act["attn_core"] == act["mlp_norm"] == d
    assert act["k"] == act["v"] == kv
    assert act["mlp_gate"] == act["mlp_up"] == act["mlp_act"] == act["mlp_mul"] == f
    assert act["logits"] == B * T * cfg.vocab_size * 4
    for never_read in ("embed", "attn_proj", "attn_res", "mlp_down", "mlp_res", "q_rope", "k_rope"):
        assert act[never_read] == 0, never_read


def test_offloaded_residuals_live_in_pinned_host_memory():
    cfg = models.get_config("llama2-tiny")
    pol = models.resolve_policy("none", "llama", offload=["mlp_gate", "mlp_up"])
    r = unit_residuals(cfg, "mlp", pol, T, B)
    f = B * T * cfg.ffn_hidden * 4
    assert r.host_bytes == 2 * f
    assert r.kept_bytes == unit_residual_bytes(cfg, "mlp", "none", T, B) - 2 * f
    # and the compiled program really puts them there
    stage = models.build_stage(cfg, (2, 3), pol)
    params = models.init_params(cfg, unit_range=(2, 3))
    x = jnp.ones((B, T, cfg.hidden), jnp.float32)
    _, bwd = jax.jit(lambda p, x: jax.vjp(stage.apply, p, x))(params, x)
    kinds = [leaf.sharding.memory_kind for leaf in jax.tree.leaves(bwd)]
    assert kinds.count("pinned_host") == 2


def test_llama2_13b_cmb_saves_between_25_and_65_percent_of_none():
    cfg = models.get_config("llama2-13b")
    none = layer_residual_bytes(cfg, "none", 4096, 1)
    cmb = layer_residual_bytes(cfg, "cmb", 4096, 1)
    assert 0.25 <= 1 - cmb / none <= 0.65
    assert none == 788_529_152  # 8 x [4096,5120] + 4 x [4096,13824] bf16 tensors


def test_model_info_big_model_without_weights():
    info = model_info(models.get_config("llama2-7b"), 4096, 1)
    assert info["params"] == 6_738_415_616
    n = info["flops_params"]
    assert n == info["params"] - 32000 * 4096  # minus the input embedding table only
    assert info["flops_per_token"] == 6 * n + 12 * 32 * 32 * 128 * 4096
    assert len(info["units"]) == 66 and info["units"][1] == {
        "name": "attn_0", "kind": "attn", "params": 4 * 4096 * 4096 + 4096}
    assert info["attention_impl"] == "xla"


def test_gpt_flops_params_exclude_position_table():
    cfg = models.get_config("gpt3-13b")
    info = model_info(cfg, 2048, 1)
    assert info["flops_params"] == info["params"] - (cfg.vocab_size + cfg.max_seq_len) * cfg.hidden


@pytest.mark.parametrize("seq,mb,msg", [(0, 1, "seq len must be"), (8, -1, "micro-batch must be"),
                                        (10_000, 1, "exceeds")])
def test_bad_sizes(seq, mb, msg):
    with pytest.raises(models.ModelConfigError, match=msg):
        model_info(models.get_config("gpt3-tiny"), seq, mb)


def test_unknown_unit_kind():
    with pytest.raises(models.ModelConfigError, match="unknown unit kind"):
        unit_residual_bytes(models.get_config("gpt3-tiny"), "ffn", "none", 8, 1)


def test_a_units_residuals_are_traced_once_per_config_policy_and_shape(monkeypatch):
    """The planner and the memory check ask again and again: the second ask, by name
    or by the policy it names, traces nothing; another shape traces again (shapes
    no other test asks for, so the first ask traces)."""
    cfg = models.get_config("gpt3-tiny")
    traced = []
    real = jax.make_jaxpr
    monkeypatch.setattr(jax, "make_jaxpr", lambda f, *a, **k: traced.append(f) or real(f, *a, **k))
    first = unit_residuals(cfg, "mlp", "cmb", 40, B)
    assert len(traced) == 1
    again = unit_residuals(cfg, "mlp", models.resolve_policy("cmb", cfg.family), 40, B)
    assert again == first and len(traced) == 1
    longer = unit_residuals(cfg, "mlp", "cmb", 48, B)
    assert len(traced) == 2 and longer.kept_bytes > first.kept_bytes
