import json
import os

import pytest

from obscura_jax.cli.main import main
from schedules import StageCosts, io


def _run(capsys, *argv):
    rc = main(["simulate", *argv])
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.mark.parametrize("argv,makespan", [
    (["--schedule", "1f1b", "--fwd", "1", "--bwd", "2"], 33),
    (["--schedule", "recomp", "--adjusted", "all", "--recompute-time", "1"], 44),
    (["--schedule", "recomp", "--adjusted", "0"], 38),
    (["--schedule", "strawman", "--adjusted", "0"], 34),
])
def test_acceptance_commands(tmp_path, capsys, argv, makespan):
    out_json = tmp_path / "o.json"
    rc, out, err = _run(capsys, *argv, "--stages", "4", "--microbatches", "8", "--json", str(out_json))
    assert rc == 0 and err == ""
    assert f"makespan {makespan}" in out.splitlines()[0]
    data = json.loads(out_json.read_text())
    assert data["makespan"] == makespan and len(data["stages"]) == 4
    header = out.splitlines()[1].split()
    assert header[:3] == ["stage", "compute", "recompute"] and "in-flight" in header


def test_schedule_json_then_from_schedule_with_costs_file(tmp_path, capsys):
    sched, costs_path = tmp_path / "s.json", tmp_path / "c.json"
    rc, out, _ = _run(capsys, "--schedule", "obscura", "--stages", "4", "--microbatches", "8", "--adjusted", "1",
                      "--swap-blocks", "2", "--swap-fraction", "0.5", "--schedule-json", str(sched),
                      "--act-bytes", "8", "--host-bandwidth", "16", "--ascii")
    assert rc == 0 and "stage 0 |" in out
    assert io.load_schedule(sched).stages[0].swap_blocks == 3
    costs_path.write_text(json.dumps(StageCosts.uniform(4, 1, 2, 1, act_bytes=8.0, host_bandwidth=16.0).to_json()))
    rc2, out2, _ = _run(capsys, "--from-schedule", str(sched), "--costs", str(costs_path))
    assert rc2 == 0 and out2.splitlines()[0] == out.splitlines()[0]


def test_gantt_output(tmp_path, capsys):
    png = tmp_path / "g.png"
    rc, out, _ = _run(capsys, "--schedule", "strawman", "--stages", "3", "--microbatches", "4", "--gantt", str(png))
    assert rc == 0 and png.stat().st_size > 1000 and png.with_suffix(".svg").exists()


@pytest.mark.parametrize("argv,needle", [
    (["--schedule", "1f1b", "--stages", "4", "--microbatches", "0"], "number of micro-batches must be >= 1"),
    (["--schedule", "1f1b", "--stages", "0", "--microbatches", "8"], "--stages must be >= 1"),
    (["--schedule", "recomp", "--stages", "4", "--microbatches", "8", "--adjusted", "4"], "adjusted K=4"),
    (["--schedule", "zb", "--stages", "4", "--microbatches", "8"], "unknown schedule 'zb'; valid:"),
    (["--schedule", "1f1b", "--stages", "four", "--microbatches", "8"], "--stages must be an integer"),
    (["--schedule", "1f1b", "--stages", "4", "--microbatches", "8", "--fwd", "x"], "--fwd must be a number"),
    (["--stages", "4", "--microbatches", "8"], "simulate needs --schedule"),
    (["--schedule", "obscura", "--stages", "4", "--microbatches", "8", "--swap-blocks", "2"],
     "needs a swap fraction"),
])
def test_bad_input_is_one_line_and_exit_2(capsys, argv, needle):
    rc, out, err = _run(capsys, *argv)
    assert rc == 2
    assert err.count("\n") == 1 and err.startswith("obscura: error: ") and needle in err


def test_malformed_files(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "obscura-schedule/1", "num_stages": 2')
    rc, _, err = _run(capsys, "--from-schedule", str(bad))
    assert rc == 2 and "malformed --from-schedule" in err and err.count("\n") == 1
    deadlocked = {"format": "obscura-schedule/1", "name": "x", "num_stages": 2, "num_microbatches": 2,
                  "stages": [{"actions": ["F0", "B0", "F1", "B1"]}, {"actions": ["F0", "F1", "B0", "B1"]}]}
    bad.write_text(json.dumps(deadlocked))
    rc, _, err = _run(capsys, "--from-schedule", str(bad))
    assert rc == 2 and "deadlock" in err and err.count("\n") == 1
    good = tmp_path / "c.json"
    good.write_text(json.dumps({"fwd": [1, 1, 1], "bwd": [2, 2, 2]}))
    rc, _, err = _run(capsys, "--schedule", "1f1b", "--stages", "4", "--microbatches", "8", "--costs", str(good))
    assert rc == 2 and "describes 3 stages" in err
    rc, _, err = _run(capsys, "--schedule", "1f1b", "--stages", "3", "--microbatches", "8", "--costs", str(good),
                      "--fwd", "2")
    assert rc == 2 and "cannot be combined with --fwd" in err


def test_existing_output_survives_a_failed_run(tmp_path, capsys):
    out_json = tmp_path / "o.json"
    out_json.write_text("{\"keep\": 1}")
    rc, _, _ = _run(capsys, "--schedule", "zb", "--stages", "4", "--microbatches", "8", "--json", str(out_json))
    assert rc == 2 and json.loads(out_json.read_text()) == {"keep": 1}


def test_simulate_never_imports_jax():
    import subprocess
    import sys
    code = ("import sys; from obscura_jax.cli.main import main; "
            "main(['simulate','--schedule','obscura','--stages','4','--microbatches','8','--adjusted','1']); "
            "import schedules.formats.gantt; assert 'jax' not in sys.modules, 'jax imported'")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr


# ---- today's schedules, their files, torch CSV and trace export ----

@pytest.mark.parametrize("argv,makespan,held", [
    (["--schedule", "1f1b", "--fwd", "1", "--bwd", "2"], 33, [4, 3, 2, 1]),
    (["--schedule", "zb-h1-capped", "--fwd", "1", "--bwd", "2"], 30, [4, 3, 2, 1]),
    (["--schedule", "zb-h1-capped", "--fwd", "1", "--bwd", "2", "--input-grad-time", "1", "--weight-grad-time",
      "1"], 30, [4, 3, 2, 1]),
    (["--schedule", "zb-h1", "--fwd", "1", "--bwd", "2", "--input-grad-time", "1", "--weight-grad-time", "1"],
     27, [4, 4, 4, 4]),
    (["--schedule", "interleaved-zb", "--virtual-stages", "2", "--fwd", "0.5", "--bwd", "1"], 25.5, [8, 8, 8, 8]),
    (["--schedule", "looped-bfs", "--virtual-stages", "2", "--fwd", "1", "--bwd", "2"], 57, [16, 16, 16, 16]),
    (["--schedule", "zb-v", "--fwd", "0.5", "--bwd", "1"], 25.5, [8, 8, 8, 8]),
    (["--schedule", "interleaved", "--virtual-stages", "2", "--fwd", "0.5", "--bwd", "1"], 28.5, [11, 9, 7, 5]),
    (["--schedule", "obscura-zb-h1", "--adjusted", "1", "--migrate"], 35, [5, 5, 2, 1]),
    (["--schedule", "obscura-interleaved", "--adjusted", "1", "--fwd", "0.5", "--bwd", "1",
      "--recompute-time", "0.2", "--swap-blocks", "2", "--swap-fraction", "0.5", "--act-bytes", "1",
      "--host-bandwidth", "4"], None, None),
])
def test_zoo_acceptance_commands_match_an_independent_longest_path(tmp_path, capsys, argv, makespan, held):
    from tests.schedules.helpers import longest_path_of_file
    out_json, sched = tmp_path / "o.json", tmp_path / "s.json"
    rc, out, err = _run(capsys, *argv, "--stages", "4", "--microbatches", "8", "--json", str(out_json),
                        "--schedule-json", str(sched))
    assert rc == 0 and err == ""
    data = json.loads(out_json.read_text())
    if makespan is not None:
        assert data["makespan"] == pytest.approx(makespan) and f"makespan {makespan:g}" in out.splitlines()[0]
        assert [st["peak_inflight_microbatches"] for st in data["stages"]] == held
    assert json.loads(sched.read_text())["format"] == "obscura-schedule/2"
    assert longest_path_of_file(sched, StageCosts.from_json(data["costs"])) == pytest.approx(data["makespan"])


def test_trace_and_torch_csv_round_trip(tmp_path, capsys):
    trace, csv_path = tmp_path / "t.json", tmp_path / "s.csv"
    rc, out, _ = _run(capsys, "--schedule", "zb-v", "--stages", "3", "--microbatches", "6", "--fwd", "0.5",
                      "--bwd", "1", "--trace", str(trace), "--torch-csv", str(csv_path))
    assert rc == 0 and out.splitlines()[1].split()[0] == "device"
    events = json.loads(trace.read_text())["traceEvents"]
    complete = [e for e in events if e["ph"] == "X"]
    assert len(complete) == 6 * 6 * 3 and {e["pid"] for e in complete} == {0, 1, 2}
    rc2, out2, _ = _run(capsys, "--from-torch-csv", str(csv_path), "--fwd", "0.5", "--bwd", "1")
    assert rc2 == 0 and out2.splitlines()[0].split("makespan")[1] == out.splitlines()[0].split("makespan")[1]


@pytest.mark.parametrize("argv,needle", [
    (["--schedule", "1f1b", "--stages", "4", "--microbatches", "8", "--virtual-stages", "2"],
     "virtual stages apply to interleaved"),
    (["--schedule", "interleaved", "--stages", "4", "--microbatches", "6"], "multiple of the pipeline depth"),
    (["--schedule", "zb-h1", "--stages", "4", "--microbatches", "8", "--migrate"], "--migrate applies to"),
    (["--from-torch-csv", "x.csv", "--from-schedule", "y.json"], "not both"),
    (["--from-torch-csv", "missing.csv"], "torch CSV not found"),
    (["--from-torch-csv", "x.csv", "--stages", "4"], "takes the schedule from the file"),
])
def test_zoo_bad_input_is_one_line(capsys, argv, needle):
    rc, _, err = _run(capsys, *argv)
    assert rc == 2 and err.count("\n") == 1 and needle in err


# ---- every bad input is one line, exit 2, no traceback, nothing written ----
from tests.obscura_jax.cli.commands import badinput  # noqa: E402

S = ["simulate", "--schedule", "1f1b", "--stages", "4", "--microbatches", "8"]
BAD = [
    (S + ["--recompute", "nosuchop"], "unknown recompute op or preset 'nosuchop'"),
    (["simulate", "--schedule", "recomp", "--stages", "4", "--microbatches", "8", "--recompute", "nosuchop"],
     "unknown recompute op"),
    (S + ["--host-bandwidth", "1e-300", "--act-bytes", "1"], "host_bandwidth 1e-300 is too low"),
    (S + ["--act-bytes", "1e308"], "act_bytes must be <= 1e+18 bytes"),
    (S + ["--act-bytes", "-1"], "act_bytes must be finite and >= 0"),
    (S + ["--fwd", "nan"], "fwd must be finite"),
    (S + ["--fwd", "inf"], "fwd must be finite"),
    (S + ["--bwd", "1e300"], "bwd must be <= 1e+12 time units"),
    (S + ["--p2p-bandwidth", "0"], "bandwidths > 0"),
    (S + ["--p2p-latency", "nan"], "p2p_latency must be <="),
    (S + ["--weight-grad-fraction", "2"], "weight_grad_fraction must be in [0, 1]"),
    (S + ["--swap-fraction", "7"], "swap fraction must be a number in [0, 1]"),
    (S + ["--warmup", "-1,2,3,4"], "warmup must hold 4 integers >= 1"),
    (["simulate", "--schedule", "1f1b", "--stages", "1000000000", "--microbatches", "8"],
     "number of stages must be <= 1024"),
    (["simulate", "--schedule", "1f1b", "--stages", "4", "--microbatches", "1000000000"],
     "number of micro-batches must be <= 65536"),
    (["simulate", "--schedule", "1f1b", "--stages", "512", "--microbatches", "512"],
     "stages x micro-batches must be <= 65536"),
    (["simulate", "--schedule", "1f1b", "--stages", "-3", "--microbatches", "8"], "--stages must be >= 1"),
    (S + ["--bogus"], "obscura simulate: error: unrecognized arguments: --bogus (see obscura simulate --help)"),
    (["simulate", "--stages"], "obscura simulate: error: argument --stages: expected one argument"),
    (S + ["--json", "/proc/x.json"], "--json /proc/x.json: cannot write there"),
    (S + ["--gantt", "/proc/x.png", "--json", "{tmp}/ok.json"], "--gantt /proc/x.png: cannot write there"),
    (S + ["--trace", "{tmp}"], "is a directory"),
    (S + ["--json", ""], "--json is empty"),
    (["simulate", "--from-schedule", "{tmp}/missing.json"], "schedule JSON not found"),
    (["simulate", "--from-schedule", "{tmp}/latin1.json"], "is not UTF-8 text (byte 0xff"),
    (["simulate", "--from-schedule", "{tmp}/notjson.json"], "malformed --from-schedule {tmp}/notjson.json"),
    (["simulate", "--from-torch-csv", "{tmp}/latin1.json"], "is not UTF-8 text"),
    (S + ["--costs", "{tmp}/latin1.json"], "--costs {tmp}/latin1.json is not UTF-8 text"),
    (["simulate", "--from-schedule", "{tmp}/nosuchop.json"], "unknown recompute op or preset 'nosuchop'"),
    # odd files (badinput.odd_files), before anything is read or built
    (S + ["--json", "{tmp}/fifo"], "is a FIFO, not a regular file: refusing to replace it"),
    (S + ["--gantt", "{tmp}/fifo.png"], "--gantt {tmp}/fifo.svg: is a FIFO"),
    (S + ["--costs", "/dev/zero"], "--costs /dev/zero: is a character device, not a regular file"),
    (["simulate", "--from-schedule", "{tmp}/fifo"], "--from-schedule {tmp}/fifo: is a FIFO"),
    (["simulate", "--from-torch-csv", "{tmp}/fifo"], "--from-torch-csv {tmp}/fifo: is a FIFO"),
    (["simulate", "--from-schedule", "{tmp}/deep.json"], "JSON nested 200000 deep; at most 500"),
    (["simulate", "--from-schedule", "{tmp}/bigint.json"], "JSON holds an integer of 5000 digits"),
    (S + ["--costs", "{tmp}/deep.json"], "--costs {tmp}/deep.json: JSON nested 200000 deep"),
    (["simulate", "--from-schedule", "{tmp}/m12.json"], "micro-batches must be <= 65536, got 1000000000000"),
    (["simulate", "--from-schedule", "{tmp}/s3000.json"], "number of stages must be <= 1024, got 3000"),
    (["simulate", "--from-torch-csv", "{tmp}/big.csv"], "micro-batches must be <= 65536, got 100000000000"),
    (["simulate", "--from-torch-csv", "{tmp}/s3000.csv"], "number of stages must be <= 1024, got 3000"),
    (["simulate", "--schedule", "interleaved", "--stages", "4", "--microbatches", "8", "--virtual-stages",
      "100000"], "number of stages must be <= 1024, got 400000"),
]


@pytest.mark.parametrize("argv,needle", BAD, ids=[" ".join(a[1:])[:60] for a, _ in BAD])
def test_bad_inputs_are_one_line_and_exit_2(capsys, tmp_path, monkeypatch, argv, needle):
    (tmp_path / "latin1.json").write_bytes(b"\xff\xfe{}")
    (tmp_path / "notjson.json").write_text("{nope")
    sched = {"format": "obscura-schedule/1", "name": "x", "num_stages": 1, "num_microbatches": 1,
             "stages": [{"actions": ["F0", "B0"], "recompute": ["nosuchop"]}]}
    (tmp_path / "nosuchop.json").write_text(json.dumps(sched))
    badinput.odd_files(tmp_path)
    os.mkfifo(tmp_path / "fifo.svg")
    badinput.check(capsys, tmp_path, monkeypatch, argv, needle.replace("{tmp}", str(tmp_path)))


def test_outputs_follow_the_umask_and_write_through_symlinks(tmp_path, capsys):
    target = tmp_path / "real.json"
    target.write_text("{}")
    link = tmp_path / "link.json"
    link.symlink_to(target)
    old = os.umask(0o022)
    try:
        rc, _, _ = _run(capsys, *S[1:], "--json", str(link))
    finally:
        os.umask(old)
    assert rc == 0 and link.is_symlink() and json.loads(target.read_text())["makespan"] > 0
    assert (target.stat().st_mode & 0o777) == 0o644
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]   # no temp file left


def test_a_large_gantt_is_rasterised(tmp_path, capsys):
    png = tmp_path / "g.png"
    rc, _, _ = _run(capsys, "--schedule", "1f1b", "--stages", "16", "--microbatches", "128", "--gantt", str(png))
    assert rc == 0 and png.stat().st_size > 1000
    svg = png.with_suffix(".svg").read_text()
    assert "<image" in svg and svg.count("<path") < 200 and len(svg) < 2_000_000
def test_calibration_and_one_device(tmp_path, capsys):
    """--calibration adds the fitted terms and says which are assumed; --one-device
    runs every stage in turn on one device (the one-GPU engine bench)."""
    from schedules.calibration import Calibration, save_calibration

    cal = tmp_path / "cal.json"
    save_calibration(Calibration(action_overhead=0.5, optimizer_s_per_byte=0.0, assumed=("link_sharing",)), cal)
    base = ["--schedule", "1f1b", "--stages", "4", "--microbatches", "8"]
    rc, out, _ = _run(capsys, *base)
    assert rc == 0 and "predicted iteration 33 (ideal" in out
    rc, out, _ = _run(capsys, *base, "--calibration", str(cal))
    # 1F1B's critical path has 2m + 2(p - 1) = 22 compute actions, each 0.5 longer
    assert rc == 0 and "predicted iteration 44 (calibrated" in out and "assumed: link_sharing" in out
    rc, out, _ = _run(capsys, *base, "--one-device")
    assert rc == 0 and "predicted iteration 96 (ideal" in out        # 4 stages x 8 x (1 + 2)
    rc, _, err = _run(capsys, *base, "--calibration", str(tmp_path / "none.json"))
    assert rc == 2 and err.count("\n") == 1 and "none.json" in err


def test_a_torch_csv_with_reduce_grad_cells_prints_one_note(capsys):
    """torch's GPipe order ends in REDUCE_GRAD cells: skipped, said once, on stderr
    (docs/formats.md), the report alone on stdout."""
    golden = os.path.join(os.path.dirname(__file__), "..", "..", "..", "schedules", "goldens", "torch", "gpipe_p4_m8.csv")
    rc, out, err = _run(capsys, "--from-torch-csv", golden)
    assert rc == 0 and "note:" not in out
    assert err.count("\n") == 1 and err.startswith("note: torch CSV: skipped 4 REDUCE_GRAD cells"), err


def test_first_weight_grad_at_once_joins_stage_0s_backward(tmp_path, capsys):
    """--first-weight-grad at-once: ZB-H1's stage 0 runs whole backwards, at the same
    makespan at unit costs; a torch CSV of the split order is joined the same way."""
    joined, csv = tmp_path / "joined.json", tmp_path / "zb_h1.csv"
    common = ["--stages", "4", "--microbatches", "8", "--schedule", "zb-h1"]
    rc, split_out, _ = _run(capsys, *common, "--torch-csv", str(csv))
    assert rc == 0
    rc, out, _ = _run(capsys, *common, "--first-weight-grad", "at-once", "--schedule-json", str(joined))
    assert rc == 0 and out.splitlines()[0] == split_out.splitlines()[0]          # the same makespan line
    stage0 = io.load_schedule(joined).stages[0].actions
    assert {a.kind.value for a in stage0} == {"F", "B"}
    rc, from_csv, _ = _run(capsys, "--from-torch-csv", str(csv), "--first-weight-grad", "at-once",
                           "--schedule-json", str(tmp_path / "again.json"))
    assert rc == 0 and io.load_schedule(tmp_path / "again.json").rows == io.load_schedule(joined).rows
