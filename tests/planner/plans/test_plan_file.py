"""planner.plans.plan_file: the plan JSON round-trips and bad files are refused in one line."""
import json

import pytest

from planner.errors import PlanError
from planner.plan import make_plan
from planner.plans.plan_file import load_plan, plan_from_json, plan_to_schedule, save_plan
from schedules import validate
from tests.planner.test_plan import P, PROF, floor_limit


def test_plan_file_round_trip_and_bad_files(tmp_path):
    plan = make_plan(PROF, P, 8, int(floor_limit(8) * 1.3))
    path = tmp_path / "plan.json"
    save_plan(plan, path)
    assert load_plan(path) == plan
    d = json.loads(path.read_text())
    assert set(d) == {"format", "num_stages", "num_microbatches", "memory_limit", "schedule", "stages",
                      "predicted_iteration_time", "baselines", "model", "num_layers", "seq_len",
                      "micro_batch", "param_dtype", "compute_dtype", "device", "profile", "profile_sha256",
                      "family", "virtual_stages", "families"} | (
                          {"stage_to_device", "device_rows"} if plan.device_rows else {"issue_order"}) | (
                          {"baseline_needs"} if plan.baseline_needs else set())
    sched = plan_to_schedule(plan)
    if not plan.device_rows:   # every action once, in an order the dependencies allow (train --plan issues in it)
        assert sorted(d["issue_order"]) == sorted(a.long for row in sched.rows for a in row)
        assert d["issue_order"][0] == "0F0"
    assert set(d["baselines"]) == {"dapple", "dapple_plus", "dapple_plus_layer", "recomp", "ohp_cmb", "strawman"}
    assert set(d["baseline_needs"]) == {n for n, t in d["baselines"].items() if t is None}
    for mutate, needle in [(lambda d: d.update(format="x"), "not an obscura-plan/1"),
                           (lambda d: d["stages"][1].update(units=[6, 9]), "starts at unit"),
                           (lambda d: d["stages"].pop(), "stages for num_stages"),
                           (lambda d: d["stages"][0].update(swap_fraction=2), "swap_fraction"),
                           (lambda d: d.update(schedule="zigzag"), "unknown")]:
        bad = json.loads(path.read_text())
        mutate(bad)
        (tmp_path / "bad.json").write_text(json.dumps(bad))
        with pytest.raises(PlanError, match=needle):
            load_plan(tmp_path / "bad.json")
    # without recorded orders the generator's default order is used (an Obscura plan)...
    d = make_plan(PROF, P, 8, int(floor_limit(8) * 1.3), families=False).to_json()
    d["stages"] = [{k: v for k, v in st.items() if k != "actions"} for st in d["stages"]]
    with pytest.raises(PlanError, match="plan 'issue_order' item .* is not an action of its schedule"):
        plan_to_schedule(plan_from_json(d))       # ...and an issue order recorded for another order is refused
    validate(plan_to_schedule(plan_from_json({k: v for k, v in d.items() if k != "issue_order"})))


def test_the_stage_mesh_layout_round_trips_and_is_optional(tmp_path):
    from dataclasses import replace
    plan = make_plan(PROF, P, 8, int(floor_limit(8) * 1.3))
    assert plan.layout == (1, 1) and "layout" not in plan.to_json()     # plans for one device a stage: as before
    mesh = replace(plan, data_parallel=2, tensor_parallel=4)
    d = mesh.to_json()
    assert d["layout"] == {"data": 2, "tensor": 4}
    path = tmp_path / "mesh.json"
    save_plan(mesh, path)
    assert load_plan(path).layout == (2, 4) and load_plan(path) == mesh
    for bad, needle in [({"data": 0, "tensor": 1}, "positive integer"), ({"data": 2}, "must be"),
                        ([2, 2], "must be"), ({"data": 2, "tensor": True}, "positive integer")]:
        with pytest.raises(PlanError, match=needle):
            plan_from_json({**d, "layout": bad})
    with pytest.raises(PlanError, match="data_parallel"):
        replace(plan, data_parallel=0)


def test_a_plan_is_validated_as_a_whole(tmp_path):
    """A plan file whose parts disagree is refused in one line before anything runs:
    its family, swap blocks, recorded issue order and stage ranges are checked
    against its schedule and its model, not only one by one (an Obscura plan: one
    stage per device, with its issue order)."""
    plan = make_plan(PROF, P, 8, int(floor_limit(8) * 1.3), families=False)
    good = plan.to_json()
    order = good["issue_order"]
    units = good["stages"][-1]["units"][1]

    def swap(d, s, blocks):
        d["stages"][s].update(swap_blocks=blocks, swap_fraction=0.5)
    for mutate, needle in [
            (lambda d: d.update(family="zigzag"), "plan 'family' 'zigzag' is not the family of its schedule"),
            (lambda d: swap(d, 1, 10 ** 6), "plan stage 1 swaps 1000000 blocks, more than the plan's 8 micro-batches"),
            (lambda d: swap(d, P - 1, 8), f"plan stage {P - 1} swaps 8 blocks; its order runs"),
            (lambda d: d.update(issue_order=["9X9"] * len(order)), "item 0 ('9X9') is not an action of its schedule"),
            (lambda d: d.update(issue_order=order[:-1] + order[:1]), f"plan 'issue_order' lists {order[0]} twice"),
            (lambda d: d.update(issue_order=order[:-1]), f"plan 'issue_order' leaves out {order[-1]}"),
            (lambda d: d.update(issue_order=order[::-1]), "which it waits on"),
            (lambda d: d["stages"][-1].update(units=[d["stages"][-1]["units"][0], units + 2]),
             f"plan stages cover units 0..{units + 1}, but its model"),
            (lambda d: d.update(num_layers=10 ** 9), "has 2000000002 units")]:
        bad = json.loads(json.dumps(good))
        mutate(bad)
        with pytest.raises(PlanError) as e:
            plan_to_schedule(plan_from_json(bad))
        assert needle in str(e.value) and "\n" not in str(e.value), (needle, str(e.value))
    plan_to_schedule(plan_from_json(json.loads(json.dumps(good))))      # the plan as written runs
