"""Running a plan on another model: `obscura train --plan plan_28b.json --model
llama2-tiny` is refused in one line naming what differs; --plan-scale-down runs the
plan's schedule and recompute choices on llama2-tiny (partition mapped
proportionally), labelled not comparable; a plan without a source still runs."""
import json
from pathlib import Path

import pytest

from obscura_jax.cli.main import main

ROOT = Path(__file__).resolve().parents[3]
PROFILE = ROOT / "results" / "h200" / "profile_llama2-13b.json"


@pytest.fixture(scope="module")
def plan_28b(tmp_path_factory):
    """The 28B plan of BENCHMARKS.md on 1F1B (Obscura's own search: one model stage per
    device, so it maps onto llama2-tiny's units): the H200 13B profile derived to 88 layers."""
    path = tmp_path_factory.mktemp("plan28b") / "plan_28b.json"
    assert main(["plan", "--profile", str(PROFILE), "--layers", "88", "--stages", "8", "--microbatches", "32",
                 "--memory-limit", "80GiB", "--no-families", "--json", str(path)]) == 0
    return path


def test_a_plan_for_another_model_is_refused_in_one_line(plan_28b, capsys):
    capsys.readouterr()
    assert main(["train", "--plan", str(plan_28b), "--model", "llama2-tiny", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"obscura: error: plan {plan_28b} was made for another run: "
                                                   "model llama2-28b vs llama2-tiny, layers 88 vs 4, seq_len 4096 "
                                                   "vs 64, micro_batch 1 vs 2")
    assert "--plan-scale-down" in err


def test_plan_scale_down_runs_the_28b_plan_on_llama2_tiny(plan_28b, tmp_path, capsys):
    out = tmp_path / "run.json"
    plan = json.loads(plan_28b.read_text())
    assert main(["train", "--plan", str(plan_28b), "--model", "llama2-tiny", "--plan-scale-down",
                 "--steps", "1", "--cost-reps", "1", "--no-progress", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "plan: NOT COMPARABLE: plan for llama2-28b (88 layers, seq 4096, micro-batch 1)" in text
    assert "-> [0, 1) [1, 3) [3, 4) [4, 5) [5, 6) [6, 7) [7, 9) [9, 10)" in text
    assert "predicted vs measured" not in text                  # predictions for 28B are not shown
    res = json.loads(out.read_text())
    assert res["plan_comparable"] is False and res["plan_source"]["model"] == "llama2-28b"
    assert "planned_peak_bytes" not in res["stages"][0]
    assert res["adjusted_stages"] == [s for s, st in enumerate(plan["stages"]) if st["adjusted"]]
    for st, planned in zip(res["stages"], plan["stages"]):   # the plan's choices, on the small model
        assert st["policy"]["recompute"] == sorted(planned["recompute"])
        assert st["adjusted"] == planned["adjusted"] and st["recomputes"] == bool(planned["recompute"])
        assert st["swap_blocks"] == planned["swap_blocks"]


def test_an_older_plan_runs_with_a_note(tmp_path, capsys):
    stages = [{"units": [0, 5], "adjusted": True, "recompute": ["full"], "swap_blocks": 0,
               "swap_fraction": 0.0, "predicted_peak_bytes": 0},
              {"units": [5, 10], "adjusted": False, "recompute": [], "swap_blocks": 0,
               "swap_fraction": 0.0, "predicted_peak_bytes": 0}]
    path = tmp_path / "old.json"
    path.write_text(json.dumps({"format": "obscura-plan/1", "num_stages": 2, "num_microbatches": 2,
                                "memory_limit": 10**9, "schedule": "obscura", "stages": stages,
                                "predicted_iteration_time": 0.0, "baselines": {}}))
    out = tmp_path / "run.json"
    assert main(["train", "--plan", str(path), "--seq-len", "16", "--steps", "1", "--cost-reps", "1",
                 "--no-progress", "--json", str(out)]) == 0
    assert f"plan: plan {path} records no model (written before plans did)" in capsys.readouterr().out
    res = json.loads(out.read_text())
    assert res["plan_comparable"] is None and res["stages"][0]["planned_peak_bytes"] == 0


def test_a_run_of_a_plan_issues_in_the_plans_order(plan_28b, tmp_path):
    """train --plan issues in the order the plan's peaks were judged in (not one from
    its own noisy cost measurement); a recorded order that does not cover the
    schedule is ignored."""
    from types import SimpleNamespace

    from obscura_jax.run.plan_run import plan_issue_order
    from planner.plan import load_plan, plan_to_schedule
    from schedules import validate

    plan = load_plan(plan_28b)
    sched = plan_to_schedule(plan)
    order = plan_issue_order(SimpleNamespace(plan=str(plan_28b)), sched)
    assert [a.long for a in order] == list(plan.issue_order)
    validate(sched)
    done = set()
    for a in order:   # each stage's actions keep their row order
        row = sched.stages[a.stage].actions
        assert all(b in done for b in row[:row.index(a)])
        done.add(a)
    broken = json.loads(plan_28b.read_text())
    broken["issue_order"] = broken["issue_order"][1:]
    path = tmp_path / "broken.json"
    path.write_text(json.dumps(broken))
    assert plan_issue_order(SimpleNamespace(plan=str(path)), sched) is None
    assert plan_issue_order(SimpleNamespace(plan=None), sched) is None


@pytest.fixture(scope="module")
def mesh_plan(tmp_path_factory):
    """A plan for llama2-tiny stages on 2 data x 1 tensor devices."""
    path = tmp_path_factory.mktemp("mesh") / "mesh.json"
    assert main(["plan", "--analytic", "llama2-tiny", "--seq-len", "64", "--micro-batch", "2", "--stages", "2",
                 "--microbatches", "4", "--memory-limit", "1GiB", "--data-parallel", "2", "--json", str(path)]) == 0
    return path


def test_a_plans_layout_is_the_runs_default_and_must_match(mesh_plan, capsys):
    from obscura_jax.cli.commands.run_args import plan_preset
    from obscura_jax.run.plan_run import plan_differences
    from obscura_jax.run.run_config import RunConfig
    from planner.plan import load_plan

    preset = plan_preset(str(mesh_plan))
    assert (preset["data_parallel"], preset["tensor_parallel"], preset["micro_batch_size"]) == (2, 1, 2)
    plan = load_plan(mesh_plan)
    one = RunConfig(plan=str(mesh_plan), seq_len=64, micro_batch_size=2)
    assert plan_differences(one, plan, one.model_config()) == ["layout 2x1 vs 1x1 (data x tensor)"]
    assert plan_differences(RunConfig(plan=str(mesh_plan), seq_len=64, micro_batch_size=2, data_parallel=2),
                            plan, one.model_config()) == []
    with pytest.raises(Exception, match="made for another run: layout 2x1 vs 1x1"):
        one.resolve(one.model_config())
    capsys.readouterr()
    assert main(["train", "--plan", str(mesh_plan), "--data-parallel", "1", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--data-parallel 1 disagrees with plan" in err and "2 data x 1 tensor" in err
