"""`obscura train` end to end through obscura_jax.cli.main.main: the JSON contract,
checkpoint/resume, and bad input (one line, exit 2, nothing overwritten). All runs
share one small shape so the compiled stage programs are reused."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from obscura_jax.cli.main import main
from obscura_jax.observe.report import fmt_time
from schedules.formats.trace import check_trace_events

BASE = ["train", "--model", "llama2-tiny", "--stages", "4", "--microbatches", "4",
        "--micro-batch-size", "2", "--seq-len", "16", "--devices", "cpu:4", "--no-progress",
        "--cost-reps", "1"]


def train(*extra):
    return main(BASE + list(extra))


def snapshot(d):
    out = {}
    for root, _, files in os.walk(d):
        for f in files:
            path = os.path.join(root, f)
            with open(path, "rb") as fh:
                out[os.path.relpath(path, d)] = fh.read()
    return out


def test_train_json_gantt_and_trace(tmp_path, capsys):
    out = tmp_path / "run.json"
    png = tmp_path / "tl.png"
    trace = tmp_path / "t.json"
    assert train("--schedule", "obscura", "--adjusted", "1", "--swap-blocks", "1", "--swap-fraction", "0.5",
                 "--steps", "3", "--json", str(out), "--gantt", str(png), "--trace", str(trace), "--check",
                 "--xla-profile", str(tmp_path / "xla")) == 0
    res = json.loads(out.read_text())
    assert len(res["losses"]) == 3 and all(np.isfinite(res["losses"]))
    assert res["check"]["equal"] and res["check"]["max_loss_rel_diff"] <= 1e-5
    for key in ("iteration_time", "simulated_iteration_time", "tokens_per_second"):
        assert res[key] > 0
    assert len(res["stages"]) == 4
    for st in res["stages"]:
        assert st["peak_bytes"] > st["weight_bytes"] > 0
        assert st["residual_bytes_per_microbatch"] > 0 and st["simulated_peak_bytes"] > 0
    # Adjusted stages run full recompute: fewer residual bytes than the plain stages.
    assert res["stages"][0]["policy"]["name"] == "full" and res["stages"][3]["policy"]["name"] == "none"
    assert res["stages"][1]["residual_bytes_per_microbatch"] < res["stages"][2]["residual_bytes_per_microbatch"]
    assert res["swap"]["bytes_out"] > 0 and res["swap"]["bytes_out"] == res["swap"]["bytes_in"]
    tl = res["timeline"]
    assert tl["num_stages"] == 4 and tl["makespan"] > 0
    measured_ops = sum(len(s["ops"]) for s in tl["stages"])
    assert measured_ops == sum(len(s["ops"]) for s in res["simulated_timeline"]["stages"]) > 4 * 4 * 2
    assert png.exists() and png.with_suffix(".svg").exists()
    printed = capsys.readouterr().out
    assert "iteration time" in printed and "check vs unpipelined model" in printed
    # every file written is listed, the Gantt chart's SVG too
    xla = sorted(str(p) for p in (tmp_path / "xla").rglob("*") if p.is_file())
    assert any(p.endswith(".xplane.pb") for p in xla)      # jax.profiler's device trace of the timed steps
    assert [ln for ln in printed.splitlines() if ln.startswith("wrote ")] == [
        f"wrote {p}" for p in (png, png.with_suffix(".svg"), trace, out, *xla)]
    # the trace: valid trace-event JSON, one track per stage (plus swap and transfer
    # tracks), recompute inside the adjusted stages' backwards, spanning the one
    # measured number: the median timed step (steps 2 and 3 timed; the lower one)
    data = json.loads(trace.read_text())
    check_trace_events(data)
    tracks = {e["args"]["name"] for e in data["traceEvents"] if e["name"] == "thread_name"}
    assert {f"stage {s}" for s in range(4)} <= tracks and "stage 1 swap out (SO)" in tracks
    assert {f"stage {s} transfers in" for s in range(1, 4)} <= tracks
    slices = [e for e in data["traceEvents"] if e["ph"] == "X"]
    # (at the share of each backward the run measured; noise can make a share 0)
    assert {e["args"]["stage"] for e in slices if e["cat"] == "recompute"} == {
        s for s in (0, 1) if res["costs"]["recompute"][s] > 0}
    assert res["timeline_step"] in (2, 3) and res["iteration_time"] == res["step_seconds"][res["timeline_step"] - 1]
    assert res["iteration_time"] == min(res["step_seconds"][1:])
    makespan = max(e["ts"] + e["dur"] for e in slices) / 1e6
    assert makespan == pytest.approx(res["iteration_time"], rel=1e-6)
    assert data["otherData"]["makespan_s"] == pytest.approx(res["iteration_time"], rel=1e-9)
    assert 0 < res["bubble_fraction"] < 1 and res["recompute_fraction"] >= 0
    # the iteration ends with its optimizer step: the timelines span the reported
    # iteration times, and the bubble is over devices x that time
    assert tl["iteration_time"] == pytest.approx(res["iteration_time"], rel=1e-9)
    assert tl["optimizer"]["end"] - tl["optimizer"]["start"] == pytest.approx(res["optimizer_time"], abs=1e-9)
    assert res["simulated_timeline"]["iteration_time"] == pytest.approx(res["simulated_iteration_time"], rel=1e-9)
    assert res["bubble_fraction"] == pytest.approx(tl["bubble_fraction"], rel=1e-9)
    idle = sum(s["idle_before"] + s["warmup_bubble"] + s["forward_bubble"] + s["backward_bubble"] + s["idle_after"]
               for s in tl["stages"]) + 4 * (tl["iteration_time"] - tl["makespan"] - res["optimizer_time"])
    assert res["bubble_fraction"] == pytest.approx(idle / (4 * res["iteration_time"]), rel=1e-6)
    # the Gantt chart's title gives the iteration time the report prints
    assert f"iteration {fmt_time(res['iteration_time'])} (optimizer step included)" in \
        png.with_suffix(".svg").read_text()
    assert f"iteration time  {fmt_time(res['iteration_time'])}" in printed
    assert "4 devices, 4 model stages (1 per device)" in printed.splitlines()[0]


def test_a_zero_bubble_run_whose_w_rederives_its_inputs(tmp_path, capsys):
    """--weight-grad rederive with the head's W at once, on the default path
    (measured costs, timeline): the plain model's losses and params (--check), the
    JSON records the choice, and each stage's held block is the one the measured
    costs price (the loss stage's head holding nothing of it)."""
    out = tmp_path / "zb.json"
    assert train("--schedule", "zb-h1", "--weight-grad", "rederive", "--head-weight-grad", "at-once",
                 "--steps", "2", "--check", "--json", str(out)) == 0
    res = json.loads(out.read_text())
    assert res["check"]["equal"] and res["weight_grad"] == {"mode": "rederive", "head": "at-once"}
    assert [st["weight_grad_at_once"] for st in res["stages"]] == [[], [], [], ["head"]]
    held = [st["weight_grad_held_bytes_per_microbatch"] for st in res["stages"]]
    assert res["costs"]["weight_grad_held"] == held and all(h > 0 for h in held)
    assert "check vs unpipelined model" in capsys.readouterr().out


def test_late_waiters_do_not_stretch_the_trace_past_the_step(tmp_path, monkeypatch):
    """On a busy machine a waiter thread can see an output ready after the step's main
    thread saw every gradient ready (make test-busy, 2026-12-03). Seen 10 s late here,
    every one: no op or transfer ends after the step, and the trace still spans
    exactly the measured iteration time."""
    import dataclasses

    from obscura_jax.observe.events import EventRecorder
    close, transfers = EventRecorder.close, EventRecorder.transfers
    monkeypatch.setattr(EventRecorder, "close", lambda self: [
        dataclasses.replace(e, ready=e.ready + 10.0) for e in close(self)])
    monkeypatch.setattr(EventRecorder, "transfers", lambda self: [
        dataclasses.replace(t, ready=t.ready + 10.0) for t in transfers(self)])
    out, trace = tmp_path / "run.json", tmp_path / "t.json"
    assert train("--schedule", "1f1b", "--steps", "3", "--json", str(out), "--trace", str(trace)) == 0
    res, data = json.loads(out.read_text()), json.loads(trace.read_text())
    assert res["iteration_time"] < 10.0
    assert data["otherData"]["makespan_s"] == pytest.approx(res["iteration_time"], rel=1e-9)
    slices = [e for e in data["traceEvents"] if e["ph"] == "X"]
    assert any(e["cat"] == "transfer" for e in slices)
    assert max(e["ts"] + e["dur"] for e in slices) / 1e6 == pytest.approx(res["iteration_time"], rel=1e-6)
    assert res["timeline"]["makespan"] <= res["iteration_time"] + 1e-9


def test_resume_gives_the_uninterrupted_step_3_loss(tmp_path):
    whole, first, second = (tmp_path / n for n in ("whole.json", "first.json", "second.json"))
    ck = tmp_path / "ck"
    common = ["--schedule", "1f1b", "--data", "stdlib"]
    assert train(*common, "--steps", "3", "--json", str(whole)) == 0
    assert train(*common, "--steps", "2", "--checkpoint-dir", str(ck), "--json", str(first)) == 0
    saved = snapshot(ck)
    # A fresh run may not reuse a directory holding checkpoints...
    assert train(*common, "--steps", "3", "--checkpoint-dir", str(ck)) == 2
    # ...a run with bad input fails before touching it...
    assert train("--schedule", "nonesuch", "--steps", "3", "--checkpoint-dir", str(ck), "--resume") == 2
    assert snapshot(ck) == saved
    # ...and a resumed run (here with another schedule: same math) continues at step 3.
    assert train("--schedule", "gpipe", "--data", "stdlib", "--steps", "3", "--checkpoint-dir", str(ck),
                 "--resume", "--json", str(second)) == 0
    w, a, b = (json.loads(p.read_text()) for p in (whole, first, second))
    # the resumed run's JSON holds the whole curve, steps 1-2 from the checkpoint dir's metrics log
    assert a["steps"] == [1, 2] and b["steps"] == [1, 2, 3] and b["start_step"] == 2
    assert b["before_resume"] == [True, True, False] and a["before_resume"] == [False, False]
    np.testing.assert_allclose(a["losses"], w["losses"][:2], rtol=1e-6)
    np.testing.assert_allclose(b["losses"], w["losses"], rtol=1e-6)
    # The older checkpoint stays until the new one is complete (both kept).
    assert {"2", "3"} <= set(os.listdir(ck))
    # Resuming with a different partition is refused.
    assert train("--schedule", "1f1b", "--stages", "2", "--data", "stdlib", "--steps", "5",
                 "--checkpoint-dir", str(ck), "--resume") == 2


BAD = [
    (["--schedule", "nonesuch"], "unknown schedule"),
    (["--stages", "11"], "11"),                      # llama2-tiny has 10 units
    (["--devices", "cpu:0"], "N >= 1"),
    (["--devices", "cpu:64"], "--devices cpu:64: the run uses 4 devices"),
    (["--stage-devices", "0,1,2,99"], "does not exist"),
    (["--data", "/nonexistent/tokens.bin"], "not found"),
    (["--policy", "nonesuch"], "nonesuch"),
    (["--swap-fraction", "1.5"], "swap"),
    (["--resume"], "--checkpoint-dir"),
    (["--plan", "/nonexistent/plan.json"], "not found"),
    # a plan beside flags it fixes; values out of range
    (["--schedule", "gpipe", "--plan", "/nonexistent/plan.json"], "--plan fixes the schedule"),
    (["--swap-blocks", "1", "--plan", "/nonexistent/plan.json"], "drop --swap-blocks"),
    (["--weight-decay=-1"], "--weight-decay must be finite and >= 0"),
    (["--weight-decay", "-1"], "--weight-decay must be finite and >= 0"),
    (["--weight-decay", "nan"], "--weight-decay must be finite and >= 0"),
    (["--optimizer", "sgd", "--weight-decay", "0.1"], "--weight-decay applies to adamw only"),
    (["--lr", "nan"], "--lr must be > 0"),
    (["--microbatches", "100000"], "--microbatches must be <= 4096"),
    (["--stages", "2000"], "number of stages must be <= 1024"),
    (["--checkpoint-every", "-1"], "--checkpoint-every must be >= 1"),
    (["--checkpoint-every", "0"], "--checkpoint-every must be >= 1, got 0 (leave it out"),
    (["--warmup-steps", "10", "--steps", "2"], "--warmup-steps 10 leaves no timed step of --steps 2"),
    (["--policy", ""], "--policy is empty"),
    (["--policy", ",,"], "--policy is empty"),
    (["--policy", "none,"], "--policy 'none,' has an empty item"),
    (["--adjusted-policy", "full,"], "--adjusted-policy 'full,' has an empty item"),
    (["--schedule", ""], "--schedule is empty"),
    (["--schedule", "obscura", "--adjusted", ""], "--adjusted must be K, all or a comma list"),
    (["--devices", "cpu:٣"], "--devices must be cpu:N or gpu"),
    (["--stage-devices", "0,1,2,٣"], "--stage-devices must be comma-separated device indices"),
    (["--checkpoint-every", "2"], "need --checkpoint-dir"),
    (["--gantt", "/proc/x.png"], "--gantt /proc/x.png: cannot write there"),
    (["--adjusted-policy", "nosuchop"], "unknown recompute op or preset 'nosuchop'"),
    (["--warmup-steps", "-1"], "must be >= 0"),
    (["--schedule", "interleaved", "--virtual-stages", "0"], "--virtual-stages"),
    (["--schedule", "1f1b", "--virtual-stages", "2"], "virtual"),
    # integers past their bounds
    (["--seed", "-1"], "--seed must be an integer in 0..9223372036854775807"),
    (["--seed", str(2 ** 63)], f"--seed must be an integer in 0..9223372036854775807 (2**63 - 1), got {2 ** 63}"),
    (["--schedule", "interleaved", "--virtual-stages", "100000"],
     "--virtual-stages 100000 on 4 stages: number of stages must be <= 1024"),
    # stage meshes (BASE: 4 stages on cpu:4, micro-batch 2)
    (["--data-parallel", "2"], "4 pipeline devices x 2 data x 1 tensor = 8 devices, but the run has 4 "
                               "(--devices): they must be equal"),
    (["--stages", "1", "--tensor-parallel", "3", "--devices", "cpu:3"],
     "--tensor-parallel 3: llama2-tiny: attention heads (4) not divisible by tensor parallelism 3"),
    (["--stages", "1", "--tensor-parallel", "8", "--devices", "cpu:8"],
     "--tensor-parallel 8: llama2-tiny: attention heads (4) not divisible by tensor parallelism 8"),
    (["--stages", "1", "--data-parallel", "4", "--devices", "cpu:4"],
     "--micro-batch-size 2 is not divisible by --data-parallel 4"),
    (["--data-parallel", "0"], "--data-parallel must be >= 1, got 0"),
    (["--stages", "2", "--data-parallel", "2", "--devices", "cpu:4", "--stage-devices", "0,1"],
     "--stage-devices places one device per stage: it does not combine with --data-parallel"),
    # a partition given by hand (llama2-tiny: 10 units)
    (["--partition", "3,3,3"], "--partition gives 3 stages, the schedule has 4 model stages"),
    (["--partition", "3,3,3,3"], "--partition covers 12 units, llama2-tiny has 10"),
    (["--partition", "4,0,3,3"], "--partition must be a comma list of unit counts >= 1 per stage"),
    (["--partition", "4,x,3,3"], "--partition must be a comma list of unit counts per stage, got '4,x,3,3'"),
    (["--partition", "4,3,3,"], "--partition must be a comma list of unit counts per stage"),
    (["--partition", "4,2,2,2", "--plan", "/nonexistent/plan.json"], "not found"),
]


@pytest.mark.parametrize("extra, msg", BAD, ids=[" ".join(e) for e, _ in BAD])
def test_bad_input_is_one_line_exit_2(extra, msg, capsys, tmp_path):
    steps = [] if "--steps" in extra else ["--steps", "1"]
    assert train(*extra, *steps, "--json", str(tmp_path / "x.json")) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("obscura: error:") and msg in err and "\n" not in err
    assert not (tmp_path / "x.json").exists()


def test_invalid_schedule_file(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"format": "obscura-schedule/1", "name": "broken", "num_stages": 2,
                               "num_microbatches": 1,
                               "stages": [{"actions": ["F0", "B0"]}, {"actions": ["B0", "F0"]}]}))
    assert train("--schedule", str(bad), "--stages", "2") == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("obscura: error:") and "\n" not in err


def write_plan(path, schedule: str, stages: list) -> str:
    """An obscura-plan/1 file for llama2-tiny's 4 stages at m = 4; each stage is its
    `units` and what it overrides of a stage that recomputes and swaps nothing."""
    rows = [{"adjusted": False, "recompute": [], "swap_blocks": 0, "swap_fraction": 0.0, "predicted_peak_bytes": 0,
             **st} for st in stages]
    path.write_text(json.dumps({"format": "obscura-plan/1", "num_stages": 4, "num_microbatches": 4,
                                "memory_limit": 10**9, "schedule": schedule, "stages": rows,
                                "predicted_iteration_time": 0.0, "baselines": {"dapple": None}}))
    return str(path)


def test_a_given_partition_runs_a_v_schedule_with_the_plain_math(tmp_path, capsys):
    """--partition (units per model stage) on ZB-V: each chunk gets its units, and
    the run equals the unpipelined model (--check)."""
    out = tmp_path / "zbv.json"
    counts = [1, 1, 1, 1, 1, 1, 1, 3]         # the head's chunk (device 0) takes three units
    assert train("--schedule", "zb-v", "--partition", ",".join(map(str, counts)), "--steps", "2", "--check",
                 "--json", str(out)) == 0
    res = json.loads(out.read_text())
    edges = np.cumsum([0] + counts)
    assert [st["units"] for st in res["stages"]] == [[int(a), int(b)] for a, b in zip(edges[:-1], edges[1:])]
    assert res["check"]["equal"]
    plan = write_plan(tmp_path / "plan.json", "1f1b", [{"units": [a, b]} for a, b in ((0, 4), (4, 6), (6, 8),
                                                                                     (8, 10))])
    capsys.readouterr()
    assert main(BASE[:3] + BASE[7:] + ["--plan", str(plan), "--partition", "4,2,2,2", "--steps", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "obscura: error: --partition: a plan fixes the partition (drop one of them)"


def test_zb_h1_with_stage_0s_backward_whole_trains_like_the_plain_model(tmp_path):
    """--first-weight-grad at-once: stage 0 runs whole backwards, the other stages keep
    their split (schedules.generators.join), with the plain model's math; a plan file
    recording that order (as `obscura plan` writes it) runs the same schedule."""
    from planner.plan import load_plan, plan_to_schedule
    from schedules import generate
    from schedules.generators.join import join_first_stage_backward

    out = tmp_path / "run.json"
    assert train("--schedule", "zb-h1", "--first-weight-grad", "at-once", "--steps", "2", "--check",
                 "--json", str(out)) == 0
    res = json.loads(out.read_text())
    assert res["check"]["equal"]
    held = [st["weight_grad_held_bytes_per_microbatch"] for st in res["stages"]]
    assert held[0] is None and all(h for h in held[1:])       # stage 0 holds no W block
    order = join_first_stage_backward(generate("zb-h1", 4, 4))
    assert {a.kind.value for a in order.rows[0]} == {"F", "B"} and "W" in {a.kind.value for a in order.rows[1]}
    plan = write_plan(tmp_path / "plan.json", "zb-h1",
                      [{"units": [a, b], "actions": [str(x) for x in order.rows[s]]}
                       for s, (a, b) in enumerate(((0, 4), (4, 6), (6, 8), (8, 10)))])
    assert plan_to_schedule(load_plan(plan)).rows == order.rows


def test_plan_runs_its_partition_policies_and_order(tmp_path):
    """A plan (obscura-plan/1) with an uneven partition, a per-op recompute set and
    swapping on stage 0 trains with the plan's settings and the plain math."""
    write_plan(tmp_path / "plan.json", "obscura",
               [{"units": [0, 4], "adjusted": True, "recompute": ["mlp_act", "mlp_mul"], "swap_blocks": 1,
                 "swap_fraction": 0.5}, {"units": [4, 5]}, {"units": [5, 7]}, {"units": [7, 10]}])
    out, ref = tmp_path / "plan_run.json", tmp_path / "gpipe.json"
    assert main(BASE[:3] + BASE[7:] + ["--plan", str(tmp_path / "plan.json"), "--steps", "2",
                                      "--json", str(out)]) == 0
    assert train("--schedule", "gpipe", "--steps", "2", "--json", str(ref)) == 0
    res, base = json.loads(out.read_text()), json.loads(ref.read_text())
    assert [st["units"] for st in res["stages"]] == [[0, 4], [4, 5], [5, 7], [7, 10]]
    assert res["stages"][0]["policy"]["recompute"] == ["mlp_act", "mlp_mul"]
    assert [st["policy"]["name"] for st in res["stages"][1:]] == ["none"] * 3
    assert res["adjusted_stages"] == [0] and res["swap"]["bytes_out"] > 0
    np.testing.assert_allclose(res["losses"], base["losses"], rtol=1e-5)


def test_bad_file_inputs_are_one_line(tmp_path, capsys, monkeypatch):
    from tests.obscura_jax.cli.commands import badinput
    np.save(tmp_path / "neg.npy", np.array([1, 2, -3, 4] * 64, dtype=np.int32))
    (tmp_path / "latin1.json").write_bytes(b"\xff{}")
    (tmp_path / "ckfile").write_text("x")
    badinput.odd_files(tmp_path)
    for extra, needle in ((["--data", "{tmp}/neg.npy"], "holds a negative token id (-3)"),
                          (["--plan", "{tmp}/latin1.json"], "is not UTF-8 text"),
                          (["--schedule", "{tmp}/latin1.json"], "is not UTF-8 text"),
                          (["--checkpoint-dir", "{tmp}/ckfile"], "ckfile: is a file, not a directory"),
                          (["--json", "{tmp}"], "is a directory"),
                          (["--compute-dtype", "float64"], "argument --compute-dtype: invalid choice"),
                          (["--lr", "-1e-3"], "--lr must be > 0"),
                          # odd files (badinput.odd_files)
                          (["--data", "{tmp}/empty.npy"], "empty.npy is empty"),
                          (["--data", "{tmp}/fifo"], "--data {tmp}/fifo: is a FIFO, not a regular file"),
                          (["--data", "/dev/zero"], "--data /dev/zero: is a character device"),
                          (["--json", "{tmp}/fifo"], "is a FIFO, not a regular file: refusing to replace it"),
                          (["--schedule", "{tmp}/m12.json"], "micro-batches must be <= 65536"),
                          (["--schedule", "{tmp}/deep.json"], "JSON nested 200000 deep"),
                          (["--plan", "{tmp}/bigint.json"], "JSON holds an integer of 5000 digits"),
                          (["--plan", "{tmp}/s3000.json"], "number of stages must be <= 1024")):
        badinput.check(capsys, tmp_path, monkeypatch, BASE + extra + ["--steps", "1"],
                       needle.replace("{tmp}", str(tmp_path)))


def test_resume_with_an_empty_checkpoint_dir_says_it_starts_afresh(tmp_path, capsys):
    ck = tmp_path / "ck"
    ck.mkdir()
    assert train("--steps", "1", "--checkpoint-dir", str(ck), "--resume") == 0
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert f"--resume: {ck} holds no checkpoint, nothing to resume; starting afresh at step 1" in err
    assert (ck / "1").is_dir()


def test_resume_checks_dtypes_and_skips_a_damaged_newest_checkpoint(tmp_path, capsys):
    ck = tmp_path / "ck"
    assert train("--steps", "2", "--checkpoint-every", "1", "--checkpoint-dir", str(ck)) == 0
    capsys.readouterr()
    # the compute dtype is part of the run's identity
    assert train("--steps", "3", "--checkpoint-dir", str(ck), "--resume", "--compute-dtype", "bfloat16") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "compute_dtype 'float32', this run has 'bfloat16'" in err
    # damage the newest step's arrays: one warning line, the step before is used
    damage_arrays(ck / "2")
    assert train("--steps", "3", "--checkpoint-dir", str(ck), "--resume", "--json", str(tmp_path / "r.json")) == 0
    cap = capsys.readouterr()
    assert cap.err.count("\n") == 1 and "checkpoint step 2" in cap.err and "using step 1" in cap.err, cap.err
    assert json.loads((tmp_path / "r.json").read_text())["start_step"] == 1
    lines = (ck / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(x)["step"] for x in lines] == [1, 2, 3]


def damage_arrays(step_dir) -> None:
    for root, _, files in os.walk(step_dir / "state"):
        for f in files:
            if "ocdbt" in root and os.sep + "d" in root:
                with open(os.path.join(root, f), "wb") as fh:
                    fh.write(b"\0" * 64)


def test_a_resume_past_a_damaged_step_prints_one_line_in_its_own_process(tmp_path):
    """The CLI process to its exit: Orbax's other reads of the damaged step, still in
    flight when its restore failed, print nothing (they printed 6,612 lines)."""
    ck = tmp_path / "ck"
    assert train("--steps", "2", "--checkpoint-every", "1", "--checkpoint-dir", str(ck)) == 0
    damage_arrays(ck / "2")
    done = subprocess.run([sys.executable, "-m", "obscura_jax", *BASE, "--steps", "3", "--checkpoint-dir", str(ck),
                           "--resume"], capture_output=True, text=True, timeout=300)
    err = done.stderr
    assert done.returncode == 0 and err.count("\n") == 1, err[-3000:]
    assert "checkpoint step 2" in err and "using step 1" in err, err


def test_a_checkpoint_resumes_only_on_its_layout(tmp_path, capsys):
    """A checkpoint of a 2 x (1 data x 2 tensor) run resumes on that layout
    (its sharded state restored per shard) and is refused on another before any work."""
    ck = tmp_path / "ck"
    mesh = ["--stages", "2", "--tensor-parallel", "2", "--devices", "cpu:4"]
    assert train(*mesh, "--steps", "1", "--checkpoint-dir", str(ck)) == 0
    out = tmp_path / "resumed.json"
    assert train(*mesh, "--steps", "2", "--checkpoint-dir", str(ck), "--resume", "--json", str(out)) == 0
    assert json.loads(out.read_text())["start_step"] == 1
    capsys.readouterr()
    before = snapshot(ck)
    assert train("--stages", "2", "--data-parallel", "2", "--devices", "cpu:4", "--steps", "3",
                 "--checkpoint-dir", str(ck), "--resume") == 2
    err = capsys.readouterr().err.strip()
    assert "checkpoint has layout '1 data x 2 tensor', this run has '2 data x 1 tensor'" in err and "\n" not in err
    assert snapshot(ck) == before


def test_help_texts_say_what_the_code_does():
    """Every generator of the registry in each --schedule(s) help (train listed 5 of
    14), and the timed-step count the default run really times (the help said 4)."""
    import argparse
    from obscura_jax.cli.main import build_parser
    from obscura_jax.observe.step_time import timed
    from schedules import SCHEDULES
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    helps = {name: {o: a.help for a in sub.choices[name]._actions for o in a.option_strings}
             for name in ("train", "compare", "simulate")}
    for name, flag in (("train", "--schedule"), ("compare", "--schedules"), ("simulate", "--schedule")):
        assert all(s in helps[name][flag] for s in SCHEDULES), (name, helps[name][flag])
    steps = helps["train"]["--steps"]
    assert steps.startswith("total training steps (default 6: after 1 warm-up step (--warmup-steps), 5 steps are "
                            "timed"), steps
    assert len(timed(list(range(6)), 1)) == 5       # what a 6-step run with 1 warm-up step times


def test_a_plan_is_checked_as_a_whole_before_training(capsys, tmp_path, monkeypatch):
    """train --plan with parts that disagree (planner.plans.plan_file; docs/formats.md):
    one line naming the plan, exit 2, before any work."""
    from tests.obscura_jax.cli.commands import badinput
    stage = {"adjusted": False, "recompute": [], "swap_blocks": 0, "swap_fraction": 0.0, "predicted_peak_bytes": 0}
    plan = {"format": "obscura-plan/1", "num_stages": 2, "num_microbatches": 4, "memory_limit": 10 ** 9,
            "schedule": "1f1b", "predicted_iteration_time": 0.0, "baselines": {},
            "stages": [{**stage, "units": [0, 5]}, {**stage, "units": [5, 10]}]}
    order = [f"{s}{k}{m}" for m in range(4) for s, k in ((0, "F"), (1, "F"), (1, "B"), (0, "B"))]
    cases = [({"stages": [{**stage, "units": [0, 5]}, {**stage, "units": [5, 12]}]},
              "its stages cover units 0..11, but llama2-tiny has 10 units"),
             ({"family": "zb-h1"}, "plan 'family' 'zb-h1' is not the family of its schedule '1f1b'"),
             ({"stages": [{**stage, "units": [0, 5], "swap_blocks": 9, "swap_fraction": 0.5},
                          {**stage, "units": [5, 10]}]}, "plan stage 0 swaps 9 blocks, more than the plan's 4"),
             ({"issue_order": order[::-1]}, "plan 'issue_order' issues"),
             ({"issue_order": order + order[:1]}, "plan 'issue_order' lists 0F0 twice")]
    for change, needle in cases:
        (tmp_path / "plan.json").write_text(json.dumps({**plan, **change}))
        badinput.check(capsys, tmp_path, monkeypatch, BASE[:3] + ["--devices", "cpu:2", "--plan", "plan.json",
                                                                  "--steps", "2", "--json", "t.json"], needle)
