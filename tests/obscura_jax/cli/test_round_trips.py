"""Every file the project writes is read by the command that takes it (docs/formats.md's
table of writers and readers), end to end on the command line with default flags:

    profile --json -> plan --profile -> plan --json -> train --plan -> train --json's
    "costs" -> simulate --costs;  simulate --schedule-json -> simulate --from-schedule;
    simulate --torch-csv -> simulate --from-torch-csv.

One training run (llama2-tiny, 2 stages) carries the chain; the rest is pure Python."""
import json

from tests.obscura_jax.cli.commands.badinput import run

SIM = ["simulate", "--schedule", "obscura", "--stages", "4", "--microbatches", "8", "--adjusted", "1",
       "--swap-blocks", "1", "--swap-fraction", "0.5"]


def test_profile_plan_train_costs_simulate(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rc, _, err = run(capsys, ["profile", "--model", "llama2-tiny", "--seq-len", "16", "--micro-batch", "2",
                              "--analytic", "H200", "--json", "prof.json"])
    assert rc == 0, err
    rc, out, err = run(capsys, ["plan", "--profile", "prof.json", "--stages", "2", "--microbatches", "2",
                                "--memory-limit", "1GiB", "--json", "plan.json"])
    assert rc == 0 and "wrote plan.json" in out, err
    rc, out, err = run(capsys, ["train", "--plan", "plan.json", "--devices", "cpu:2", "--steps", "2",
                                "--cost-reps", "1", "--no-progress", "--json", "train.json"])
    assert rc == 0 and "wrote train.json" in out, err
    result = json.loads((tmp_path / "train.json").read_text())
    assert {"host_bandwidth_out", "host_bandwidth_in"} <= set(result["costs"])   # keys the reader ignores
    (tmp_path / "costs.json").write_text(json.dumps(result["costs"]))
    rc, out, err = run(capsys, ["simulate", "--schedule", result["schedule"], "--stages", "2", "--microbatches", "2",
                                "--costs", "costs.json"])
    assert rc == 0 and "predicted iteration" in out and err == "", err


def test_schedule_json_and_torch_csv_read_back(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rc, first, err = run(capsys, SIM + ["--schedule-json", "s.json", "--torch-csv", "t.csv"])
    assert rc == 0, err
    table = first.splitlines()[:6]
    rc, again, err = run(capsys, ["simulate", "--from-schedule", "s.json"])
    assert rc == 0 and again.splitlines()[:6] == table, err
    rc, out, err = run(capsys, ["simulate", "--from-torch-csv", "t.csv"])
    assert rc == 0 and out.startswith("t: 4 devices, 4 model stages (1 per device), 8 micro-batches") and err == "", out + err
