"""planner.mesh_plan: one device's profile of a data x tensor stage mesh (weights as
the runtime holds them, kept bytes checked against the trace), the data all-reduce
on the plan's time, and plans that record their layout (and, for one device a
stage, are what they were before)."""
from dataclasses import replace

import numpy as np
import pytest

import models
from models.units import unit_param_count
from planner.analytic import analytic_profile
from planner.errors import PlanError
from planner.layouts.memory import params_per_gpu
from planner.layouts.hardware import Hardware
from planner.layouts.mesh_costs import (MeshLayout, StageSync, data_parallel_seconds, gradient_sync_end,
                                        tp_collectives)
from planner.layouts.unit_costs import unit_splits
from planner.mesh_plan import plan_mesh, profile_device, profile_model
from planner.plan import plan_search
from planner.profile import FULL, UNIT_KINDS, derive_profile
from planner.recompute.residuals import exact_unit_kept
from schedules import simulate
from tests.planner.synthetic import synthetic_profile

CFG = models.get_config("llama2-tiny")


@pytest.fixture(scope="module")
def prof():
    """llama2-tiny at micro-batch 4 (traced bytes: the residual check applies)."""
    return analytic_profile(CFG, 64, 4, "H200")


def test_the_profiles_model_and_device():
    derived = derive_profile(analytic_profile(CFG, 64, 1, "H200"), 6, model="llama2-tiny@6L")
    assert profile_model(derived) == CFG.replace(num_layers=6)
    with pytest.raises(PlanError, match="registered"):
        profile_model(synthetic_profile())
    assert profile_device(replace(synthetic_profile(), device="NVIDIA A100-SXM4-80GB")).name == "A100-80GB"
    assert profile_device(replace(synthetic_profile(), device="cpu")).name == "H200"


def test_layouts_the_model_or_micro_batch_cannot_take(prof):
    with pytest.raises(PlanError, match=r"attention heads \(4\) not divisible by tensor parallelism 8"):
        plan_mesh(prof, MeshLayout(1, 8))
    # 2 KV heads over 4 devices: each keeps the KV head its 1 query head reads (replicated in pairs)
    assert plan_mesh(prof, MeshLayout(1, 4)).layout.tensor == 4
    with pytest.raises(PlanError, match="micro-batch 4 is not divisible by data parallelism 3"):
        plan_mesh(prof, MeshLayout(3, 1))


def test_weights_per_device_are_the_runtimes(prof):
    mesh = plan_mesh(prof, MeshLayout(2, 2))
    item = np.dtype(CFG.param_dtype).itemsize
    for kind in UNIT_KINDS:
        n, on_device = unit_param_count(CFG, kind), params_per_gpu([kind], CFG, 2)
        moments = on_device
        # params + the gradient accumulator as sharded, Adam's mu and nu, its step count
        assert mesh.profile.unit(kind).weight_bytes == 2 * item * on_device + 2 * item * moments + 4
    assert mesh.profile.unit("embed").weight_bytes == prof.unit("embed").weight_bytes   # replicated


def test_kept_bytes_per_device(prof):
    mesh = plan_mesh(prof, MeshLayout(2, 2))
    dev, one = mesh.profile.unit("mlp"), prof.unit("mlp")
    assert mesh.profile.micro_batch == 2
    assert dev.input_bytes == one.input_bytes / 2                                  # rows split, replicated over T
    assert dev.op("mlp_norm").act_bytes == one.op("mlp_norm").act_bytes / 2       # a norm: replicated over T
    assert dev.op("mlp_gate").act_bytes == one.op("mlp_gate").act_bytes / 4       # column-parallel: split
    # time: the roofline's split share divides by T, all of it by D, plus the unit's all-reduce
    split = unit_splits(CFG, 64, 2, "xla", profile_device(prof))["mlp"]
    comm = tp_collectives("mlp", CFG, 128.0, MeshLayout(2, 2), Hardware())
    assert 0.5 < split.fwd < 1 and comm.fwd > 0
    assert dev.fwd_time == pytest.approx(one.fwd_time * (1 - split.fwd / 2) / 2 + comm.fwd)


def test_the_traced_check_per_device(prof):
    rows = plan_mesh(prof, MeshLayout(2, 1))
    traced = exact_unit_kept(analytic_profile(CFG, 64, 2, "H200"))
    for kind in UNIT_KINDS:
        for r in (frozenset(), frozenset({"q"}), frozenset({FULL})):
            assert rows.unit_kept(kind, r) == traced(kind, r)
    tensor = plan_mesh(prof, MeshLayout(1, 2))
    # q alone frees nothing while q_rope is saved: the trace's excess stays, undivided
    excess = traced(kind="attn", recompute=frozenset({"q"})) - analytic_profile(CFG, 64, 2, "H200").unit(
        "attn").kept_bytes({"q"})
    assert excess > 0
    dev = tensor.profile.unit("attn")
    assert tensor.unit_kept("attn", frozenset({"q"})) == dev.kept_bytes({"q"}) + 2 * excess
    assert tensor.unit_kept("attn", frozenset()) == dev.kept_bytes(())


def test_the_data_all_reduce_ends_the_iteration(prof):
    res = plan_search(prof, 2, 4, 2**40, layout=MeshLayout(2, 1), families=False)
    mesh = plan_mesh(prof, MeshLayout(2, 1))
    ev = res.best
    grads = [data_parallel_seconds(mesh.stage_params(u), 4, 4, mesh.layout, mesh.hardware, False)[0]
             for u in ev.config.partition]
    end, _ = gradient_sync_end(simulate(ev.schedule, ev.costs), [StageSync(g) for g in grads], False)
    assert res.plan.predicted_iteration_time == pytest.approx(max(end, ev.makespan))
    assert res.plan.predicted_iteration_time > ev.makespan and grads[0] > 0
    assert plan_mesh(prof, MeshLayout(1, 2)).synced_time(ev) == ev.makespan     # no data axis: nothing to sync


def test_plans_record_their_layout_and_one_device_is_unchanged(prof):
    one = plan_search(prof, 2, 4, 2**40).plan
    assert plan_search(prof, 2, 4, 2**40, layout=MeshLayout()).plan.to_json() == one.to_json()
    mesh = plan_search(prof, 2, 4, 2**40, layout=MeshLayout(2, 2)).plan
    assert mesh.layout == (2, 2) and mesh.to_json()["layout"] == {"data": 2, "tensor": 2}
    assert mesh.source.micro_batch == 4            # the whole micro-batch, as the run's --micro-batch-size
    assert max(st.predicted_peak_bytes for st in mesh.stages) < max(st.predicted_peak_bytes for st in one.stages)
