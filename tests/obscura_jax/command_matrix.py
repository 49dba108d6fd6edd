"""Shared by test_command_matrix_llama.py and test_command_matrix_gpt.py (two files so
that pytest-xdist runs the two models in parallel). Every documented path
runs. simulate and compare --check with every schedule family of
schedules.generators.SCHEDULES (a family added later is covered without editing this
file) on both tiny models, through the CLI with its defaults (measured costs,
timeline, summary, compare's Gantts for every family), on 4 emulated CPU devices,
each family checked against the unpipelined model (--check: equal); train --check
--gantt for one family of each kind, the kinds shared between the two models (train
and compare run the same trainer and summary: compare covers every family on both
models, and one family of each kind exercises train's own flags); profile -> plan -> train --plan --check at two
memory limits (the planner picks the family: today 1f1b where 1F1B fits and obscura
at the tighter limit; `plan` has no flag to force a family); and train --check across
2 processes x 2 devices for one plain family (llama2-tiny) and one chunked family
(gpt3-tiny): one multi-process launch per file. `simulate` takes no model: it runs
in the llama2-tiny file only.

One model's whole matrix runs in one pytest process (cli.main in-process, one small
shape), so the stage programs compiled for one schedule serve the next (same units,
policy and shape: the in-memory jit caches and the suite's persistent cache)."""
from __future__ import annotations

import json

from obscura_jax.cli.main import main
from planner import load_profile, smallest_feasible_limit
from schedules.generators import SCHEDULES, model_stages

P = 4
SHAPE = ["--stages", str(P), "--microbatches", "4", "--micro-batch-size", "2", "--seq-len", "16"]
RUN = SHAPE + ["--devices", "cpu:4", "--no-progress", "--cost-reps", "1", "--steps", "2"]
FAMILIES = sorted(SCHEDULES)


def ok(argv: list[str], capsys) -> str:
    """Run `obscura argv`; it must exit 0 without a line on stderr but notes."""
    rc = main(argv)
    out, err = capsys.readouterr()
    assert rc == 0, (argv, rc, err[-3000:])
    assert "Traceback" not in err and "internal error" not in err, (argv, err[-3000:])
    return out


def check_train_json(path, schedule: str, *, num_devices: int = P) -> dict:
    """A train JSON of `schedule`: --check equal; one row per model stage, each with
    its pipeline device; one row per pipeline device with its model stages."""
    res = json.loads(path.read_text())
    p = model_stages(schedule, P)
    assert res["check"]["equal"], (schedule, res["check"])
    assert res["num_stages"] == p and len(res["stages"]) == p, schedule
    assert len(res["pipeline_devices"]) == num_devices, schedule
    assert sorted(s for d in res["pipeline_devices"] for s in d["stages"]) == list(range(p))
    for s, st in enumerate(res["stages"]):
        assert st["simulated_peak_bytes"] > st["weight_bytes"] > 0, (schedule, s)
        # A stage's measured compute may be 0 on a busy machine: an op's start is inferred as
        # no earlier than its inputs were SEEN ready (obscura_jax.observe.events), and a waiter
        # thread that runs late can see an input ready after the op itself. The run's
        # first forward has no input to wait for: the stages' sum is positive.
        assert st["measured"]["compute"] >= 0, (schedule, s)
        assert s in res["pipeline_devices"][st["pipeline_device"]]["stages"]
    assert sum(st["measured"]["compute"] for st in res["stages"]) > 0, schedule
    assert res["timeline"]["num_stages"] == p and res["simulated_iteration_time"] > 0
    return res


def simulate_every_family(tmp_path, capsys) -> None:
    for name in FAMILIES:
        out = tmp_path / f"sim_{name}.json"
        ok(["simulate", "--schedule", name, "--stages", str(P), "--microbatches", "4", "--json", str(out),
            "--gantt", str(tmp_path / f"sim_{name}.png")], capsys)
        assert json.loads(out.read_text())["num_stages"] == model_stages(name, P), name
        assert (tmp_path / f"sim_{name}.png").stat().st_size > 0


# one family of each kind of order: one chunk per device, V chunks in a loop, a split
# backward, a V-shape, Obscura's transformation; each model trains its share
KIND_FAMILIES = {"llama2-tiny": ("1f1b", "zb-v"), "gpt3-tiny": ("interleaved", "zb-h1", "obscura")}


def train_each_kind(model: str, tmp_path, capsys) -> None:
    """train --check --gantt (--gantt is not a default) for the model's share of KIND_FAMILIES."""
    assert set().union(*KIND_FAMILIES.values()) <= set(FAMILIES)
    for name in KIND_FAMILIES[model]:
        out, png = tmp_path / f"train_{name}.json", tmp_path / f"train_{name}.png"
        printed = ok(["train", "--model", model, "--schedule", name, *RUN, "--check", "--json", str(out),
                      "--gantt", str(png)], capsys)
        check_train_json(out, name)
        assert "check vs unpipelined model" in printed and "(equal at" in printed, name
        assert png.stat().st_size > 0 and png.with_suffix(".svg").stat().st_size > 0


def compare_every_family(model: str, tmp_path, capsys) -> None:
    """compare --check of every family: each run's JSON as train's, checked equal."""
    out = tmp_path / "cmp"
    printed = ok(["compare", "--model", model, "--schedules", ",".join(FAMILIES), *RUN, "--check",
                  "--out", str(out)], capsys)
    runs = json.loads((out / "compare.json").read_text())["runs"]
    assert [r["schedule"] for r in runs] == FAMILIES
    for r in runs:
        check_train_json(out / f"{r['schedule']}.json", r["schedule"])
        assert (out / f"{r['schedule']}_measured.png").stat().st_size > 0
    assert printed.count("(equal at") == len(FAMILIES) and "DIFFERENT" not in printed
    # the same data and math: every family's losses agree
    for r in runs[1:]:
        assert r["losses"] == runs[0]["losses"] or max(
            abs(a - b) / abs(b) for a, b in zip(r["losses"], runs[0]["losses"])) < 1e-5, r["schedule"]
    assert all(name in printed for name in FAMILIES)


def plan_then_train(model: str, tmp_path, capsys) -> set[str]:
    """profile -> plan -> train --plan --check, twice: a limit 1F1B fits in, then one
    halfway between the first plan's smallest and largest stage peak (stage 0 has to
    recompute), or the smallest feasible limit where that is higher: the first plan
    partitions by measured times, and on a busy machine an uneven partition's smallest
    peak can put the halfway point below the floor. The planner picks each plan's
    family: returns the schedules run."""
    prof = tmp_path / "profile.json"
    ok(["profile", "--model", model, "--seq-len", "16", "--micro-batch", "2", "--reps", "1", "--json", str(prof)],
       capsys)
    floor = smallest_feasible_limit(load_profile(prof), P, 4)
    ran, limit = set(), "64GiB"
    for i in range(2):
        plan, out = tmp_path / f"plan{i}.json", tmp_path / f"plan_run{i}.json"
        ok(["plan", "--profile", str(prof), "--stages", str(P), "--microbatches", "4", "--memory-limit", limit,
            "--json", str(plan)], capsys)
        ok(["train", "--plan", str(plan), "--model", model, "--devices", "cpu:4", "--no-progress",
            "--cost-reps", "1", "--steps", "2", "--check", "--json", str(out)], capsys)
        res = json.loads(out.read_text())
        assert res["check"]["equal"] and res["plan_comparable"] is not False, limit
        ran.add(res["schedule"])
        peaks = [st["predicted_peak_bytes"] for st in json.loads(plan.read_text())["stages"]]
        limit = str(max(int((max(peaks) + min(peaks)) / 2), floor))
    return ran


def train_on_two_processes(model: str, schedule: str, tmp_path) -> None:
    """train --check on 2 processes x 2 devices (a subprocess launch with a timeout)."""
    from tests.obscura_jax.mp_helpers import crash_report, run
    out = tmp_path / "run.json"
    rc, text = run(["train", "--model", model, "--schedule", schedule, *SHAPE, "--devices", "cpu",
                    "--processes", "2", "--devices-per-process", "2", "--no-progress", "--cost-reps", "1",
                    "--steps", "2", "--check", "--json", str(out)], timeout=300)
    assert rc == 0, crash_report(text)
    res = check_train_json(out, schedule)
    assert res["processes"] == 2 and {st["process"] for st in res["stages"]} == {0, 1}
