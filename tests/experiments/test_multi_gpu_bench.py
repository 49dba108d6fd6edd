"""The multi-GPU bench's plan step and run list (experiments.multi_gpu_bench): plans
that adjust the early stages, a profile scaled to the one-GPU H200 run, and run
argv that the real `obscura train` parser accepts."""
import json
from pathlib import Path

import pytest

from experiments import multi_gpu_bench as mgb
from obscura_jax.cli.main import build_parser
from obscura_jax.errors import UsageError

REFERENCE = Path(__file__).resolve().parents[2] / mgb.ONE_GPU_REFERENCE


def test_shape_validation():
    assert mgb.BenchShape(stages=8).num_layers == 32 and mgb.BenchShape(stages=4).microbatches == (8, 16)
    for bad in (dict(stages=1), dict(stages=4, processes=3), dict(stages=4, factors=(0,))):
        with pytest.raises(UsageError):
            mgb.BenchShape(**bad)


def test_profile_scaled_to_the_one_gpu_run_reproduces_its_costs():
    """At the reference's 16 layers the scaled profile's summed F and B are the one-GPU
    run's summed measured costs, and its host bandwidth the run's standalone GB/s."""
    from planner.profile import derive_profile  # lazy: only this test needs it

    prof, scales = mgb.bench_profile(mgb.BenchShape(stages=4), REFERENCE)
    ref = json.loads((REFERENCE / "gpu_1f1b.json").read_text())["costs"]
    at16 = derive_profile(prof, 16)
    assert sum(at16.unit(k).fwd_time for k in at16.kinds) == pytest.approx(sum(ref["fwd"]), rel=1e-9)
    assert sum(at16.unit(k).bwd_time for k in at16.kinds) == pytest.approx(sum(ref["bwd"]), rel=1e-9)
    assert prof.num_layers == 16 and 30e9 < prof.host_bandwidth < 50e9 and "F x" in prof.device
    assert scales["fwd"] > 1 and scales["bwd"] > 1    # the roofline is optimistic


def test_gpu_plan_adjusts_early_stages_only(tmp_path):
    shape = mgb.BenchShape(stages=4, factors=(2,))
    summary = mgb.make_plans(shape, tmp_path, reference=REFERENCE, log=lambda *_: None)
    plan = summary["plans"]["8"]
    assert plan["adjusted"] and plan["adjusted"][0] == 0 and len(plan["adjusted"]) < 4
    assert plan["predicted_speedup_vs_dapple_plus"] > 1.0
    assert plan["baselines"]["dapple"] is None          # 1F1B does not fit the limit: recompute is forced
    on_disk = json.loads((tmp_path / "plans" / "plan_m8.json").read_text())
    assert on_disk["model"] == "llama2-7b@16L" and on_disk["seq_len"] == 4096 and on_disk["num_stages"] == 4


def test_run_argv_parse_and_cover_the_matrix(tmp_path):
    for shape in (mgb.BenchShape(stages=8), mgb.smoke_shape(processes=4, factors=(2, 4))):
        configs = mgb.run_configs(shape, tmp_path)
        names = {f"m{m}_{lay}_{s}" for m in shape.microbatches for lay in mgb.LAYOUTS for s in mgb.SCHEDULES}
        assert names | {f"m{shape.microbatches[0]}_proc_swap", f"m{shape.microbatches[0]}_proc_noswap"} == set(configs)
        for label, argv in configs.items():
            args = build_parser().parse_args(["train", *argv])
            multi = "_proc_" in label
            assert (args.processes == shape.num_processes) == multi, label
            if label.endswith("dapple_plus"):
                assert args.schedule == "recomp" and args.adjusted == "all"
        assert build_parser().parse_args(["train", *configs["m%d_proc_noswap" % shape.microbatches[0]]]).no_swap


def test_run_all_records_a_failure_and_a_deadline_skip(tmp_path):
    bad = {"bad": ["--model", "no-such-model", "--no-progress"], "late": ["--model", "llama2-tiny"]}
    status = mgb.run_all(bad, tmp_path, timeout=120, deadline=None, only=["bad"], log=lambda *_: None)
    assert status["bad"].startswith("failed (exit 2)") and "no-such-model" in status["bad"]
    with pytest.raises(UsageError, match="unknown run"):
        mgb.run_all(bad, tmp_path, timeout=1, only=["nope"])
    status = mgb.run_all({"late": ["--model", "llama2-tiny"]}, tmp_path, timeout=60, deadline=0.0,
                         log=lambda *_: None)
    assert status["late"].startswith("skipped")


@pytest.mark.parametrize("gpus", [4, 8])
def test_committed_gpu_runs_resolve_as_obscura_train_would(gpus):
    """Every run of the GPU call, with the committed plans of results/h200x<N>/plans,
    goes through `obscura train`'s own flag handling and schedule/partition checks
    (nothing is allocated): the plan matches the run's model and shape, the counts are p, m."""
    from obscura_jax.cli.commands.run_args import fill_defaults, plan_preset, run_config  # lazy: only this test

    root = REFERENCE.parents[1] / f"h200x{gpus}" / "plans"
    shape = mgb.BenchShape(stages=gpus)
    for label, argv in mgb.run_configs(shape, root).items():
        args = build_parser().parse_args(["train", *argv])
        args.schedule = args.schedule or "1f1b"      # as obscura_jax/cli/commands/train.py's run() does
        fill_defaults(args, plan_preset(args.plan))
        run = run_config(args)
        cfg = run.model_config()
        schedule, partition = run.resolve(cfg)
        m = int(label.split("_")[0][1:])
        assert (schedule.num_stages, schedule.num_microbatches, len(partition)) == (gpus, m, gpus), label
        assert cfg.name == "llama2-7b" and cfg.num_layers == 4 * gpus and run.seq_len == 4096, label
        assert run.micro_batch_size == 1 and cfg.compute_dtype == "bfloat16", label
        if label.endswith("_obscura"):
            assert run.plan_labels().get("plan_comparable") is True, label
