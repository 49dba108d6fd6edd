"""`obscura plan` / `obscura profile` through obscura_jax.cli.main.main: tables, files,
and one-line errors (exit 2) for bad input."""
import json
import re

import pytest

from obscura_jax.cli.main import main
from planner.plan import load_plan
from planner.profile import save_profile
from tests.planner.synthetic import synthetic_profile


@pytest.fixture(scope="module")
def profile_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("prof") / "profile.json"
    save_profile(synthetic_profile(num_layers=8), path)
    return path


def run(capsys, *argv):
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def test_plan_prints_the_table_and_writes_the_plan(capsys, tmp_path, profile_path):
    """Every family in the table, at its best fitting time or what it needs; the
    pick is the fastest; the paper's baselines beside it; the JSON has them all."""
    from planner.families import FAMILIES
    out_path = tmp_path / "plan.json"
    rc, out, err = run(capsys, "plan", "--profile", profile_path, "--stages", 4, "--microbatches", 8,
                       "--memory-limit", "120MiB", "--json", out_path)
    assert rc == 0, err
    assert out.splitlines()[0].count("4 devices") == 1 and "pick: " in out and "the paper's baselines" in out
    for f in FAMILIES:
        assert f"  {f.label} " in out
    for name in ("DAPPLE", "DAPPLE+", "Recomp-N", "OHP-CMB", "Strawman"):
        assert name in out
    plan = load_plan(out_path)
    assert plan.num_devices == 4 and len(plan.families) == len(FAMILIES)
    best = min(f.iteration_time for f in plan.families if f.fits)
    assert plan.predicted_iteration_time <= best * (1 + 1e-9)
    assert all(st.predicted_peak_bytes <= 120 * 2 ** 20 for st in plan.stages)
    for f in plan.families:
        if f.evaluated and not f.fits:
            assert f.needs_bytes > 120 * 2 ** 20 and f"needs {f.needs_bytes / 2 ** 20:.2f} MiB" in out


def test_obscura_alone_prints_its_adjusted_stages(capsys, tmp_path, profile_path):
    out_path = tmp_path / "plan.json"
    rc, out, err = run(capsys, "plan", "--profile", profile_path, "--stages", 4, "--microbatches", 8,
                       "--memory-limit", "120MiB", "--no-families", "--json", out_path)
    assert rc == 0, err
    assert "adjusted stages 0.." in out and "Obscura on 1F1B" in out and "schedule families" not in out
    plan = load_plan(out_path)
    assert plan.num_stages == 4 and plan.adjusted_stages and not plan.families


def test_plan_flags(capsys, profile_path):
    rc, out, err = run(capsys, "plan", "--profile", profile_path, "--stages", 4, "--microbatches", 8,
                       "--memory-limit", "120MiB", "--no-cmb", "--no-swap", "--no-partition", "--no-ip")
    assert rc == 0, err
    lines = [ln.split() for ln in out.splitlines() if re.match(r"\s+\d+\s+\[", ln)]
    assert lines and all(cols[5] == "0" for cols in lines)  # lambda column: no swapping


def test_plan_on_an_analytic_profile(capsys):
    rc, out, err = run(capsys, "plan", "--analytic", "llama2-tiny", "--seq-len", 64, "--stages", 2,
                       "--microbatches", 4, "--memory-limit", "1GiB")
    assert rc == 0, err
    assert "analytic:A100-80GB" in out and "pick: " in out


@pytest.mark.parametrize("mutate, needle", [
    (lambda d: d.update(format="obscura-schedule/1"), "not an obscura-profile/1"),
    (lambda d: d["units"]["attn"]["ops"].update(q_magic={"fwd_time": 0, "act_bytes": 0}), "unknown op 'q_magic'"),
    (lambda d: d["units"]["mlp"].update(bwd_time=-0.1), "negative"),
    (lambda d: d["units"].pop("head"), "missing unit 'head'"),
])
def test_bad_profiles_fail_with_one_line(capsys, tmp_path, mutate, needle):
    d = synthetic_profile().to_json()
    mutate(d)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(d))
    rc, out, err = run(capsys, "plan", "--profile", path, "--stages", 4, "--microbatches", 8,
                       "--memory-limit", "1GiB")
    assert rc == 2
    assert err.startswith("obscura: error: ") and needle in err and err.count("\n") == 1


@pytest.mark.parametrize("argv, needle", [
    (["--memory-limit", "lots"], "is not a size"),
    (["--memory-limit", "30MiB"], "smallest feasible limit is"),
    (["--memory-limit", "70MiB"], "smallest feasible limit is"),
    (["--memory-limit", "1GiB", "--stages", "40"], "need at least as many units"),
])
def test_bad_requests_fail_with_one_line(capsys, profile_path, argv, needle):
    base = {"--stages": "4", "--microbatches": "8"}
    args = ["plan", "--profile", str(profile_path)]
    extra = dict(zip(argv[::2], argv[1::2]))
    for k, v in {**base, **extra}.items():
        args += [k, v]
    rc, out, err = run(capsys, *args)
    assert rc == 2 and needle in err and err.count("\n") == 1


def test_malformed_json_and_missing_files(capsys, tmp_path):
    bad = tmp_path / "p.json"
    bad.write_text('{"format": "obscura-profile/1", ')
    for path, needle in ((bad, "malformed --profile"), (tmp_path / "nope.json", "profile not found")):
        rc, out, err = run(capsys, "plan", "--profile", path, "--stages", 2, "--microbatches", 2,
                           "--memory-limit", "1GiB")
        assert rc == 2 and needle in err and err.count("\n") == 1
    rc, out, err = run(capsys, "profile", "--model", "llama2-nope", "--seq-len", 8, "--json", tmp_path / "x.json")
    assert rc == 2 and "unknown model" in err


# ---- every bad input is one line, exit 2, no traceback, nothing written ----
from tests.obscura_jax.cli.commands import badinput  # noqa: E402

PLAN = ["plan", "--profile", "{prof}", "--stages", "4", "--microbatches", "8"]
BAD = [
    (PLAN + ["--memory-limit", "1e400"], "memory limit (--memory-limit) must be a finite size"),
    (PLAN + ["--memory-limit", "1e400GiB"], "must be a finite size of at most 1 EiB"),
    (PLAN + ["--memory-limit", "1GiB", "--reserve", "1e400"], "reserve (--reserve) must be a finite size"),
    (PLAN + ["--memory-limit", "-1GiB"], "memory limit (--memory-limit) must be > 0 bytes, got '-1GiB'"),
    (PLAN + ["--memory-limit", "1GiB", "--reserve=-1GiB"], "reserve (--reserve) must be >= 0 bytes"),
    (PLAN + ["--memory-limit", "1GiB", "--reserve", "2GiB"], "--reserve 2GiB leaves nothing"),
    (PLAN + ["--memory-limit", "lots"], "cannot read a memory limit (--memory-limit) from 'lots'"),
    (PLAN + ["--memory-limit", "1MiB"], "below stage 0's weights alone"),
    (["plan", "--profile", "{prof}", "--stages", "4", "--microbatches", "10000000", "--memory-limit", "1GiB"],
     "number of micro-batches must be <= 65536"),
    (["plan", "--profile", "{prof}", "--stages", "0", "--microbatches", "8", "--memory-limit", "1GiB"],
     "--stages must be >= 1"),
    (["plan", "--profile", "{prof}", "--stages", "four", "--microbatches", "8", "--memory-limit", "1GiB"],
     "obscura plan: error: argument --stages: invalid int value: 'four' (see obscura plan --help)"),
    (PLAN + ["--memory-limit", "1GiB", "--layers", "0"], "--layers must be >= 1"),
    (PLAN + ["--memory-limit", "1GiB", "--json", "/proc/x.json"], "--json /proc/x.json: cannot write there"),
    (PLAN + ["--memory-limit", "1GiB", "--json", "{tmp}"], "is a directory"),
    (["plan", "--profile", "{tmp}/latin1.json", "--stages", "4", "--microbatches", "8", "--memory-limit", "1GiB"],
     "is not UTF-8 text (byte 0xff at offset 0)"),
    (["plan", "--profile", "{tmp}/none.json", "--stages", "4", "--microbatches", "8", "--memory-limit", "1GiB"],
     "profile not found"),
    (["plan", "--stages", "4", "--microbatches", "8", "--memory-limit", "1GiB"],
     "obscura plan: error: one of the arguments --profile --analytic is required"),
    (PLAN, "the following arguments are required: --memory-limit"),
    # every input is read before an output is written
    (PLAN + ["--memory-limit", "1GiB", "--calibration", "{tmp}/latin1.json", "--json", "{tmp}/out.json"],
     "is not UTF-8 text"),
    (PLAN + ["--memory-limit", "1GiB", "--calibration", "{tmp}/deep.json", "--json", "{tmp}/out.json"],
     "--calibration {tmp}/deep.json: JSON nested 200000 deep"),
    (PLAN + ["--memory-limit", "1GiB", "--json", "{tmp}/fifo"], "is a FIFO, not a regular file: refusing"),
    (["plan", "--profile", "{tmp}/fifo", "--stages", "4", "--microbatches", "8", "--memory-limit", "1GiB"],
     "--profile {tmp}/fifo: is a FIFO, not a regular file"),
    (["plan", "--profile", "{tmp}/bigint.json", "--stages", "4", "--microbatches", "8", "--memory-limit", "1GiB"],
     "JSON holds an integer of 5000 digits"),
]


@pytest.mark.parametrize("argv,needle", BAD, ids=[" ".join(a[5:])[:60] for a, _ in BAD])
def test_bad_inputs_are_one_line_and_exit_2(capsys, tmp_path, monkeypatch, profile_path, argv, needle):
    (tmp_path / "latin1.json").write_bytes(b"\xff{}")
    argv = [a.replace("{prof}", str(profile_path)) for a in argv]
    badinput.odd_files(tmp_path)
    badinput.check(capsys, tmp_path, monkeypatch, argv, needle.replace("{tmp}", str(tmp_path)))


# ---- stage meshes: --data-parallel / --tensor-parallel ----
def test_plan_for_a_stage_mesh_records_its_layout(capsys, tmp_path):
    out_path = tmp_path / "mesh.json"
    rc, out, err = run(capsys, "plan", "--analytic", "gpt3-tiny", "--seq-len", 64, "--micro-batch", 4,
                       "--stages", 2, "--microbatches", 4, "--memory-limit", "1GiB",
                       "--data-parallel", 2, "--tensor-parallel", 4, "--json", out_path)
    assert rc == 0, err
    assert "micro-batch 4) on analytic:A100-80GB, stages on 2 data x 4 tensor devices" in out
    assert "limit 1.00 GiB per device" in out and "data all-reduce once a step" in out
    d = json.loads(out_path.read_text())
    assert d["layout"] == {"data": 2, "tensor": 4} and d["micro_batch"] == 4
    rc, out, err = run(capsys, "plan", "--analytic", "gpt3-tiny", "--seq-len", 64, "--stages", 2,
                       "--microbatches", 4, "--memory-limit", "1GiB", "--json", out_path)
    assert rc == 0 and "layout" not in json.loads(out_path.read_text()) and "tensor devices" not in out


@pytest.mark.parametrize("argv, needle", [
    (["--tensor-parallel", "8"], "tensor parallelism 8: llama2-tiny: attention heads (4) not divisible"),
    (["--tensor-parallel", "3"], "attention heads (4) not divisible by tensor parallelism 3"),
    (["--data-parallel", "0"], "--data-parallel must be >= 1"),
    (["--tensor-parallel", "-2"], "--tensor-parallel must be >= 1"),
])
def test_layouts_that_cannot_be_planned_fail_with_one_line(capsys, tmp_path, argv, needle):
    out_path = tmp_path / "p.json"
    rc, out, err = run(capsys, "plan", "--analytic", "llama2-tiny", "--seq-len", 64, "--stages", 2,
                       "--microbatches", 4, "--memory-limit", "1GiB", *argv, "--json", out_path)
    assert rc == 2 and needle in err and err.count("\n") == 1 and not out_path.exists()


def test_a_mesh_needs_a_registered_model(capsys, profile_path):
    rc, out, err = run(capsys, "plan", "--profile", profile_path, "--stages", 4, "--microbatches", 8,
                       "--memory-limit", "1GiB", "--tensor-parallel", "2")
    assert rc == 2 and "needs the profile's model registered" in err and err.count("\n") == 1


def test_plan_exports_what_it_simulated(capsys, tmp_path, profile_path):
    """--schedule-json, --costs-json, --torch-csv, --trace and --gantt write the pick
    as simulated; `simulate` on the schedule JSON, and on the torch CSV with the
    recomputing stages named, gives the plan's iteration."""
    f = {k: tmp_path / n for k, n in (("s", "s.json"), ("c", "c.json"), ("t", "t.csv"), ("tr", "tr.json"),
                                      ("g", "g.png"), ("p", "plan.json"))}
    rc, out, err = run(capsys, "plan", "--profile", profile_path, "--stages", 4, "--microbatches", 8,
                       "--memory-limit", "120MiB", "--no-swap", "--json", f["p"], "--schedule-json", f["s"],
                       "--costs-json", f["c"], "--torch-csv", f["t"], "--trace", f["tr"], "--gantt", f["g"])
    assert rc == 0, err
    assert all(p.exists() for p in f.values()) and f["g"].with_suffix(".svg").exists()
    plan = load_plan(f["p"])
    cmd = next(ln for ln in out.splitlines() if ln.startswith("from the CSV: obscura simulate "))
    for argv in (["simulate", "--from-schedule", f["s"], "--costs", f["c"], "--json", tmp_path / "a.json"],
                 cmd.split()[4:] + ["--json", tmp_path / "b.json"]):
        rc, _, err = run(capsys, *argv)
        assert rc == 0, err
        sim = json.loads(open(argv[-1]).read())
        assert sim["makespan"] == pytest.approx(plan.predicted_iteration_time, rel=1e-9)


def test_a_micro_batch_that_does_not_split_is_rescaled_and_said(capsys, tmp_path):
    rc, out, err = run(capsys, "plan", "--analytic", "llama2-tiny", "--seq-len", 64, "--stages", 2,
                       "--microbatches", 4, "--memory-limit", "1GiB", "--data-parallel", 2,
                       "--json", tmp_path / "p.json")
    assert rc == 0, err
    assert "an estimate" in out and "planned at micro-batch 2" in out
    plan = load_plan(tmp_path / "p.json")
    assert plan.source.micro_batch == 2 and plan.layout == (2, 1)


def test_a_profile_with_scratch_is_counted_without_reserve_and_without_the_note(capsys, tmp_path):
    """`obscura plan` on a profile recording each unit's XLA scratch: every stage's
    predicted peak carries its units' scratch (the same plan otherwise: nothing to
    choose with the search's options off and room to spare), with no --reserve and
    no note; the profile without it prints the note."""
    from dataclasses import replace

    from planner.costs import stage_scratch
    old = synthetic_profile(num_layers=8)
    scratch = {"embed": 1e5, "attn": 3e5, "mlp": 7e5, "head": 2e6}
    new = replace(old, units=tuple((k, replace(u, scratch_bytes=scratch[k])) for k, u in old.units))
    plans = {}
    for name, prof in (("without", old), ("with", new)):
        save_profile(prof, tmp_path / f"{name}.json")
        rc, out, err = run(capsys, "plan", "--profile", tmp_path / f"{name}.json", "--stages", 4, "--microbatches",
                           8, "--memory-limit", "10GiB", "--no-cmb", "--no-swap", "--no-partition", "--no-ip",
                           "--no-families", "--json", tmp_path / f"{name}_plan.json")
        assert rc == 0, err
        assert ("records no XLA scratch" in out) == (name == "without"), out
        plans[name] = load_plan(tmp_path / f"{name}_plan.json")
    for before, after in zip(plans["without"].stages, plans["with"].stages):
        assert before.units == after.units
        assert after.predicted_peak_bytes - before.predicted_peak_bytes == pytest.approx(
            stage_scratch(new, tuple(after.units)), abs=1)
