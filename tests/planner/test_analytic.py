"""Shape-derived profiles, and the paper's headline setting on one (Llama-2 28B,
p = 8, seq 4096, micro-batch 1, 80 GiB)."""
import pytest

import models
import models.info as info
from planner.analytic import analytic_profile
from planner.device import DEVICES
from planner.plan import plan_search
from planner.profile import derive_profile


@pytest.fixture(scope="module")
def prof28():
    return analytic_profile(models.get_config("llama2-28b"), 4096, 1, "A100-80GB")


def test_analytic_profile_is_labelled_and_its_bytes_are_traced(prof28):
    cfg = models.get_config("llama2-28b")
    assert prof28.device == "analytic:A100-80GB" and prof28.num_layers == 88
    act = info.op_act_bytes(cfg.replace(attention_impl="xla"), 4096, 1)
    for kind, unit in prof28.units:
        assert {n: o.act_bytes for n, o in unit.ops} == {n: act[n] for n in unit.op_names}
    # fp32 params: params + grads + adamw mu, nu = 16 bytes a parameter (+ step counts)
    n_attn = 4 * 5120 * 5120 + 5120
    assert prof28.unit("attn").weight_bytes == pytest.approx(16 * n_attn, abs=64)
    spec = DEVICES["A100-80GB"]
    gate = prof28.unit("mlp").op("mlp_gate").fwd_time
    assert gate == pytest.approx(2 * 4096 * 5120 * 13824 / spec.matmul_flops)
    assert spec.matmul_flops == spec.peak_flops * 0.6     # the assumed A100 efficiency
    assert prof28.host_bandwidth == spec.host_bandwidth


def test_derived_13b_profile_equals_the_28b_shape(prof28):
    p13 = analytic_profile(models.get_config("llama2-13b"), 4096, 1, "A100-80GB")
    assert derive_profile(p13, 88, model="llama2-28b") == prof28


def test_28b_on_80gib(prof28):
    """Obscura's own search (the paper's families-off planner) on the 28B shape."""
    res = plan_search(prof28, 8, 16, "80GiB", families=False)
    plan = res.plan
    assert plan.baseline("dapple") is None and plan.baseline("ohp_cmb") is None  # they do not fit
    assert all(st.predicted_peak_bytes <= 80 * 2 ** 30 for st in plan.stages)
    assert 0 <= res.last_adjusted < 7 and plan.adjusted_stages == tuple(range(res.last_adjusted + 1))
    speedup = plan.baseline("dapple_plus") / plan.predicted_iteration_time
    assert 1.15 < speedup <= 4 / 3 + 1e-9  # above the paper's floor, below the no-recompute ceiling
    assert plan.predicted_iteration_time <= min(t for _, t in plan.baselines if t is not None)
