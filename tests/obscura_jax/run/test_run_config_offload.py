"""RunConfig's offload set and RecomputePolicy objects as policies: validated when
the config is built (one line each), resolved into the base policy, and carried to
adjusted stages less what they recompute. No JAX computation: only policies."""
import dataclasses

import pytest

import models
import schedules
from obscura_jax import ObscuraError, RunConfig
from obscura_jax.runtime.pipeline import stage_policies

CFG = models.get_config("llama2-tiny")


@pytest.mark.parametrize("kw, message", [
    (dict(offload="mlp_gate,,mlp_up"), "has an empty item"),
    (dict(offload="mlp_gate,"), "has an empty item"),
    (dict(offload=""), "names no op"),
    (dict(offload="bogus"), "unknown offload op name 'bogus' for llama"),
    (dict(offload=("mlp_gate", 3)), "must be op or preset names"),
    (dict(policy="mlp", offload="mlp_gate"), "mlp_gate cannot be both recomputed and offloaded"),
    (dict(policy="layer", offload="mlp_gate"), "stands alone"),
    (dict(policy=3), "RunConfig.policy must be"),
    (dict(adjusted_policy=models.resolve_policy("cmb", "llama", offload="q")), "adjusted stages offload"),
    (dict(policy=models.resolve_policy("none", "gpt", offload="qkv")), "is for gpt, not llama"),
])
def test_bad_offload_or_policy_is_one_line_when_built(kw, message):
    with pytest.raises(ObscuraError, match=message) as e:
        RunConfig(**kw)
    assert "\n" not in str(e.value)


def test_offload_joins_the_base_policy_in_any_spelling():
    pol = models.resolve_policy("cmb", "llama", offload="mlp_gate,mlp_up")
    for run in (RunConfig(policy="cmb", offload="mlp_gate,mlp_up"), RunConfig(policy="cmb", offload=["mlp_gate", "mlp_up"]),
                RunConfig(policy=pol), RunConfig(policy=models.resolve_policy("cmb", "llama"), offload="mlp_up,mlp_gate")):
        assert run.base_policy() == pol
    assert RunConfig(offload=" mlp_gate , mlp_up ").offload == ("mlp_gate", "mlp_up")
    assert RunConfig().base_policy() == models.resolve_policy("none", "llama")
    # the config's own fields, a policy object included, survive a replace (validated again)
    run = dataclasses.replace(RunConfig(policy=pol), steps=2)
    assert run.policy is pol and run.base_policy() == pol


def test_a_recompute_policy_is_a_per_stage_policy_too():
    cmb = models.resolve_policy("cmb", "llama")
    assert RunConfig(adjusted_policy=cmb).adjusted_policy == tuple(sorted(cmb.recompute))
    layer = models.resolve_policy("layer", "llama")
    assert RunConfig(adjusted_policy=layer).adjusted_policy == ("layer",)


def test_adjusted_stages_offload_what_they_do_not_recompute():
    sched = schedules.generate("obscura", 4, 8, adjusted=2, recompute=("cmb",))
    sched_full = schedules.generate("obscura", 4, 8, adjusted=1)
    base = RunConfig(offload="mlp_gate,mlp_act").base_policy()
    pols = stage_policies(CFG, sched, base)
    assert [p.offload for p in pols] == [{"mlp_gate"}] * 3 + [{"mlp_gate", "mlp_act"}]  # cmb recomputes mlp_act
    assert all("mlp_act" in p.recompute for p in pols[:3])
    assert [p.offload for p in stage_policies(CFG, sched_full, base)] == [set(), set(), base.offload, base.offload]
