"""scripts/bench/bench_multi_gpu.py end to end on CPU (--cpu-smoke): plan, one Obscura plan
run on 2 local processes x 2 emulated devices, report; and bad input as one line."""
import json

import bench_multi_gpu as B


def test_cpu_smoke_plan_run_report(tmp_path, capsys):
    rc = B.main(["all", "--cpu-smoke", "--factors", "2", "--out", str(tmp_path), "--runs", "m8_proc_obscura", "--timeout", "240"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "m8_proc_obscura          ok in" in out
    res = json.loads((tmp_path / "runs" / "m8_proc_obscura.json").read_text())
    assert res["processes"] == 2 and res["plan_comparable"] is True and res["num_microbatches"] == 8
    assert (tmp_path / "gantt" / "m8_proc_obscura.png").stat().st_size > 0
    summary = json.loads((tmp_path / "bench_multi_gpu.json").read_text())
    row = summary["runs"]["m8_proc_obscura"]
    assert row["measured_over_simulated"] > 0 and len(row["peak_bytes"]) == 4
    assert "| 8 | one process per GPU | obscura |" in (tmp_path / "table.md").read_text()
    [status] = tmp_path.glob("status_*Z.json")
    assert json.loads(status.read_text()) == {"m8_proc_obscura": out.split("m8_proc_obscura          ")[1].splitlines()[0]}


def test_bad_input_is_one_line(tmp_path, capsys):
    assert B.main(["run", "--gpus", "1", "--out", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip() == "bench_multi_gpu: error: --gpus must be at least 2, got 1"
    assert B.main(["run", "--gpus", "4", "--out", str(tmp_path / "x")]) == 2
    assert "no plans in" in capsys.readouterr().err
    assert B.main(["plan", "--factors", "2,a", "--out", str(tmp_path)]) == 2
    assert "--factors must be a comma list" in capsys.readouterr().err
