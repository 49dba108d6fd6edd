"""What a plan records about its source (model, shape, dtypes, device, profile file
and sha256), older plans without it, the mismatch check and the proportional
partition mapping of a scaled-down run."""
import hashlib
import json
from dataclasses import replace

import pytest
from hypothesis import given, settings, strategies as st

import models
from planner.errors import PlanError
from planner.plan import load_plan, make_plan, plan_from_json, save_plan
from planner.plans.plan_meta import PlanSource, mismatches, scale_partition, source_from_json
from planner.profile import save_profile
from tests.planner.synthetic import synthetic_profile
from tests.budget import examples


@pytest.fixture(scope="module")
def planned(tmp_path_factory):
    path = tmp_path_factory.mktemp("meta") / "prof.json"
    prof = synthetic_profile(num_layers=8)
    save_profile(prof, path)
    return prof, path, make_plan(prof, 4, 8, 10**13, profile_path=path)


def test_a_plan_records_its_source(planned, tmp_path):
    prof, path, plan = planned
    src = plan.source
    assert (src.model, src.num_layers, src.seq_len, src.micro_batch, src.device) == \
        (prof.model, 8, prof.seq_len, prof.micro_batch, prof.device)
    assert src.profile == "prof.json" and src.profile_sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    save_plan(plan, tmp_path / "plan.json")
    d = json.loads((tmp_path / "plan.json").read_text())
    assert d["model"] == prof.model and d["profile_sha256"] == src.profile_sha256
    assert load_plan(tmp_path / "plan.json") == plan


def test_dtypes_come_from_the_registered_config():
    """The profile format has no dtypes: the registered config of its model gives
    them, and a model not registered here has none."""
    prof = synthetic_profile(num_layers=4)
    cfg = models.get_config("llama2-tiny")
    src = PlanSource.of_profile(replace(prof, model="llama2-tiny"))
    assert (src.param_dtype, src.compute_dtype, src.profile) == (cfg.param_dtype, cfg.compute_dtype, None)
    unknown = PlanSource.of_profile(replace(prof, model="llama-from-elsewhere"))
    assert (unknown.param_dtype, unknown.compute_dtype) == (None, None)


def test_an_older_plan_without_a_source_still_loads(planned):
    _, _, plan = planned
    d = {k: v for k, v in plan.to_json().items() if k not in PlanSource.__dataclass_fields__}
    old = plan_from_json(d)
    assert old.source is None and old.stages == plan.stages
    with pytest.raises(PlanError, match="missing key 'seq_len'"):
        plan_from_json({**d, "model": "x", "num_layers": 2, "micro_batch": 1})
    with pytest.raises(PlanError, match="'num_layers' must be a positive integer"):
        source_from_json({"model": "x", "num_layers": 0, "seq_len": 2, "micro_batch": 1})


def test_mismatches_name_what_differs():
    cfg = models.get_config("llama2-tiny")
    same = PlanSource("llama2-tiny", 4, 64, 2, "float32", "float32")
    assert mismatches(same, cfg, 64, 2) == []
    big = PlanSource("llama2-28b", 88, 4096, 1, "float32", "bfloat16")
    assert mismatches(big, cfg, 64, 2) == ["model llama2-28b vs llama2-tiny", "layers 88 vs 4",
                                           "seq_len 4096 vs 64", "micro_batch 1 vs 2",
                                           "compute_dtype bfloat16 vs float32"]
    assert mismatches(PlanSource("llama2-tiny", 4, 64, 2), cfg, 32, 2) == ["seq_len 64 vs 32"]


def test_scale_partition_maps_the_28b_plan_onto_llama2_tiny():
    plan = ((0, 23), (23, 45), (45, 67), (67, 89), (89, 111), (111, 133), (133, 155), (155, 178))
    assert scale_partition(plan, 10) == ((0, 1), (1, 3), (3, 4), (4, 5), (5, 6), (6, 7), (7, 9), (9, 10))
    assert scale_partition(plan, 178) == plan
    with pytest.raises(PlanError, match="8 stages cannot be mapped onto 6 units"):
        scale_partition(plan, 6)


@settings(max_examples=examples(60), deadline=None)
@given(st.lists(st.integers(1, 30), min_size=1, max_size=12), st.integers(1, 200))
def test_scale_partition_tiles_any_target(sizes, units):
    bounds = [0]
    for n in sizes:
        bounds.append(bounds[-1] + n)
    partition = tuple(zip(bounds, bounds[1:]))
    if len(partition) > units:
        with pytest.raises(PlanError):
            scale_partition(partition, units)
        return
    out = scale_partition(partition, units)
    assert len(out) == len(partition) and out[0][0] == 0 and out[-1][1] == units
    assert all(a < b for a, b in out) and all(out[i][1] == out[i + 1][0] for i in range(len(out) - 1))


def test_a_derived_model_is_its_base_model_with_more_layers():
    """derive_profile names a shape it cannot find registered "<model>@<layers>L": a
    run of that model with that many layers is the plan's run."""
    cfg = models.get_config("llama2-tiny", num_layers=6)
    src = PlanSource("llama2-tiny@6L", 6, 64, 2)
    assert src.base_model == "llama2-tiny" and mismatches(src, cfg, 64, 2) == []
    assert PlanSource("llama2-tiny@6L", 8, 64, 2).base_model == "llama2-tiny@6L"


def test_a_plan_without_a_layout_is_for_one_device_a_stage():
    from planner.plans.plan_meta import layout_from_json
    assert layout_from_json({}) == (1, 1)
    assert layout_from_json({"layout": {"data": 4, "tensor": 2}}) == (4, 2)
    with pytest.raises(PlanError, match="layout 'tensor'"):
        layout_from_json({"layout": {"data": 4, "tensor": -2}})
    with pytest.raises(PlanError, match="must be"):
        layout_from_json({"layout": "x" * 10_000})       # a long value is cut in the message
    try:
        layout_from_json({"layout": "x" * 10_000})
    except PlanError as e:
        assert len(str(e)) < 200
