"""The planner's per-stage peak is never under the measured one, on stage meshes:
`obscura profile` measures gpt3-tiny on this CPU (one device, micro-batch 2), `obscura
plan --data-parallel D --tensor-parallel T` plans on it, and `obscura train --plan`
runs the plan on 8 emulated CPU devices (it takes the layout from the plan). Each
stage's accounted peak (weights + live activations counted in issue order + the
stage's XLA scratch) is at most the plan's; with nothing recomputed or swapped on
1F1B the two are equal but for Adam's step count, which the profile holds once a
unit and a stage once, and for the scratch, which the plan bounds by the sum of
its units' (planner.costs.stage_scratch) where the run measures the compiled stage's."""
import json

import pytest

import models
from obscura_jax.cli.main import main
from planner.baselines import evaluate_baselines, minimum_memory
from planner.costs import stage_scratch
from planner.identify import stage_peak_1f1b
from planner.layouts.mesh_costs import MeshLayout
from planner.mesh_plan import plan_mesh
from planner.profile import load_profile
from planner.search import Setting
from tests.planner.profile_times import fixed_times_file

ADAM_STEP_COUNT = 4     # bytes: an int32 per optimizer state


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    path = tmp_path_factory.mktemp("mesh_e2e") / "gpt3-tiny.json"
    assert main(["profile", "--model", "gpt3-tiny", "--seq-len", "64", "--micro-batch", "2", "--reps", "1",
                 "--json", str(path)]) == 0
    # bytes are what is checked; the times are fixed (tests/planner/profile_times.py)
    return fixed_times_file(path, path.with_name("gpt3-tiny-fixed-times.json"))[0]


def only_adjusted_fit(path, stages: int, m: int, layout: MeshLayout) -> int:
    """A per-device limit between Obscura's memory floor and the least 1F1B or any
    baseline needs on this stage mesh (as test_profiler does on one device), on the
    profile's fixed times: Obscura's own search (--no-families) adjusts stages."""
    mesh = plan_mesh(load_profile(path), layout)
    prof = mesh.profile
    even = tuple(models.even_partition(prof.num_units, stages))
    free = Setting(prof, m, float("inf"), mesh.unit_kept)
    need = max(stage_peak_1f1b(prof, r, s, stages, m, frozenset(), mesh.unit_kept) for s, r in enumerate(even))
    least = min(max(ev.peaks) for ev in evaluate_baselines(free, even).values())
    floor = minimum_memory(free, even)[0]
    assert floor < min(need, least)
    return int(floor + 0.5 * (min(need, least) - floor))


def plan_and_train(path, tmp_path, stages, m, data, tensor, limit, *extra):
    tmp_path.mkdir(exist_ok=True)
    plan, run = tmp_path / "plan.json", tmp_path / "run.json"
    assert main(["plan", "--profile", str(path), "--stages", str(stages), "--microbatches", str(m),
                 "--memory-limit", str(limit), "--data-parallel", str(data), "--tensor-parallel", str(tensor),
                 *extra, "--json", str(plan)]) == 0
    assert main(["train", "--plan", str(plan), "--devices", "cpu:8", "--steps", "2", "--cost-reps", "1",
                 "--no-progress", "--json", str(run)]) == 0
    planned, res = json.loads(plan.read_text()), json.loads(run.read_text())
    assert res["layout"]["data"] == data and res["layout"]["tensor"] == tensor and res["plan_comparable"] is True
    for s, st in enumerate(res["stages"]):
        assert st["planned_peak_bytes"] == planned["stages"][s]["predicted_peak_bytes"]
        assert st["planned_vs_measured_bytes"] >= 0, (s, st)
    return planned, res


@pytest.mark.slow
def test_1f1b_on_2_data_x_2_tensor_is_exact(measured, tmp_path):
    _, res = plan_and_train(measured, tmp_path, 2, 4, 2, 2, "1GiB", "--no-families")
    device = plan_mesh(load_profile(measured), MeshLayout(2, 2)).profile
    for st in res["stages"]:
        units = st["units"][1] - st["units"][0]
        scratch_bound = stage_scratch(device, tuple(st["units"])) - st["temp_bytes"]
        assert scratch_bound >= 0
        a, b = st["units"]     # the input gradient its backward writes beside its residuals (program_outputs)
        dx = device.unit(device.kinds[a]).input_bytes if a > 0 else 0
        # the simulated timeline can see the next gradient arrive while B still reads
        # the last one; the ledger settles each action at once, in issue order
        dy = device.unit(device.kinds[b]).input_bytes if b < device.num_units else 0
        extra = st["planned_vs_measured_bytes"] - (ADAM_STEP_COUNT * (units - 1) + scratch_bound + dx)
        assert extra in (0, dy), st


@pytest.mark.slow
def test_adjusted_stages_on_1_data_x_2_tensor(measured, tmp_path):
    limit = only_adjusted_fit(measured, 4, 8, MeshLayout(1, 2))
    planned, res = plan_and_train(measured, tmp_path, 4, 8, 1, 2, limit, "--no-families")
    assert any(st["adjusted"] for st in planned["stages"]) and res["adjusted_stages"]


@pytest.mark.slow
def test_any_family_on_1_data_x_4_tensor_and_4_stages_x_2_data(measured, tmp_path):
    plan_and_train(measured, tmp_path / "a", 2, 4, 1, 4, "1GiB")
    plan_and_train(measured, tmp_path / "b", 4, 4, 2, 1, "1GiB")
