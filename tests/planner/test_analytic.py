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
    # above the paper's floor, below the no-recompute ceiling: 4/3 for a 1F1B-shaped
    # family; a zero-bubble one (its W holding only the matmuls' inputs and output
    # cotangents, which the analytic profile prices, fits in 80 GiB) also fills 1F1B's
    # (p - 1) bubble slots of m + p - 1
    ceiling = 4 / 3 * ((16 + 8 - 1) / 16 if plan.family.startswith("zb") else 1)
    assert 1.15 < speedup <= ceiling + 1e-9
    assert plan.predicted_iteration_time <= min(t for _, t in plan.baselines if t is not None)


def test_analytic_profile_holds_the_least_w_block(prof28):
    """Each unit's weight_grad_bytes: its weight matmuls' distinct inputs and output
    cotangents in the compute dtype (the traced programs hold the same:
    tests/obscura_jax/runtime/test_backward_split.py). A Llama-2-13B-shaped layer at
    seq 4096: 240 MiB (attention) + 404 MiB (MLP), under the 752 MiB it keeps with
    nothing recomputed; the stage costs carry the sums."""
    from planner.analytic import weight_grad_bytes
    from planner.costs import stage_costs

    cfg = models.get_config("llama2-28b")
    mib = 2 ** 20
    assert prof28.unit("attn").weight_grad_bytes == weight_grad_bytes(cfg, "attn", 4096, 1) == 240 * mib
    assert prof28.unit("mlp").weight_grad_bytes == 404 * mib
    assert prof28.unit("head").weight_grad_bytes == 4096 * 2 * (5120 + 32000)   # h and the logits' cotangent
    assert prof28.unit("attn").kept_bytes() + prof28.unit("mlp").kept_bytes() == 752 * mib
    costs = stage_costs(prof28, ((0, 89), (89, 178)), [(), ()])
    assert costs.weight_grad_held[1] == 44 * 644 * mib + prof28.unit("head").weight_grad_bytes


def test_the_heads_w_runs_at_once_when_it_holds_more_per_flop_than_a_layer():
    """The runtime's rule (obscura_jax.runtime.weight_grad): bytes per FLOP of the
    head's W (1/h + 1/V per token, in compute bytes) against a layer's; the
    big models' vocabularies (6x and 10x the hidden size) keep a deferred W, a
    vocabulary under about 3x the hidden size does not; the analytic profile of such
    a model records the head's W as holding nothing."""
    from planner.analytic import head_weight_grad_at_once, weight_grad_bytes, weight_grad_flops

    for name in ("llama2-13b", "gpt3-13b", "llama2-tiny", "gpt3-tiny", "llama-30b"):
        assert not head_weight_grad_at_once(models.get_config(name), 4096 if "tiny" not in name else 64, 1), name
    small_vocab = models.get_config("llama2-tiny", vocab_size=128)      # V = 2h
    assert head_weight_grad_at_once(small_vocab, 64, 1)
    cfg = models.get_config("llama2-13b")
    head = weight_grad_bytes(cfg, "head", 4096, 1) / weight_grad_flops(cfg, "head", 4096, 1)
    assert head == pytest.approx((1 / 5120 + 1 / 32000) * 2 / 2)        # 2 bytes over 2 FLOPs a multiply-add
    assert analytic_profile(small_vocab, 64, 1, "H200").unit("head").weight_grad_bytes == 0.0
