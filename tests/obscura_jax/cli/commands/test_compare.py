"""`obscura compare --demo` (what `make demo` runs), shortened: llama2-tiny learns
stdlib text on 4 emulated CPU devices under 1F1B and Obscura, in one process; and
compare on 2 processes x 2 devices."""
import json
import os

import pytest

from schedules.formats.trace import check_trace_events

from obscura_jax.cli.main import main
from obscura_jax.observe.report import CPU_NOTE, fmt_time

pytestmark = pytest.mark.slow


def test_demo_loss_falls_and_writes_measured_gantts(tmp_path, capsys):
    out = tmp_path / "demo"
    assert main(["compare", "--demo", "--steps", "8", "--cost-reps", "1", "--no-progress",
                 "--out", str(out), "--json", str(tmp_path / "cmp.json")]) == 0
    whole = json.loads((out / "compare.json").read_text())
    assert json.loads((tmp_path / "cmp.json").read_text()) == whole and whole["format"] == "obscura-compare/1"
    res = whole["runs"]
    assert [r["schedule"] for r in res] == ["1f1b", "obscura"]
    for r in res:
        assert r["data"] == "stdlib" and r["model"] == "llama2-tiny" and len(set(r["devices"])) == 4
        assert len(r["losses"]) == 8
        assert r["losses"][-1] < r["losses"][0] - 0.5, r["losses"]
    obscura = res[1]
    assert obscura["adjusted_stages"] == [0, 1] and obscura["swap"]["bytes_out"] > 0
    # Same data, same math: both schedules see the same losses.
    assert res[0]["losses"] == pytest.approx(res[1]["losses"], rel=1e-5)
    # Recompute on stages 0-1 lowers their peak memory below 1F1B's.
    assert obscura["stages"][0]["peak_bytes"] < res[0]["stages"][0]["peak_bytes"]
    for name in ("measured.png", "1f1b_measured.png", "obscura_measured.png", "table.txt"):
        assert (out / name).stat().st_size > 0
    for name in ("1f1b", "obscura"):   # each run's charted step as a trace spanning its iteration time
        trace = json.loads((out / f"{name}_trace.json").read_text())
        check_trace_events(trace)
        run = next(r for r in res if r["schedule"] == name)
        assert trace["otherData"]["makespan_s"] == pytest.approx(run["iteration_time"], rel=1e-9)
    table = capsys.readouterr().out
    assert "tokens/s" in table and "obscura:adjusted=1" in table and "bubble" in table
    # CPU times are illustrative; where the measured order contradicts the simulated one, a line says so
    assert f"note: {CPU_NOTE}" in table and "4 devices, 4 model stages (1 per device)" in table
    contradicts = ((res[0]["iteration_time"] - res[1]["iteration_time"])
                   * (res[0]["simulated_iteration_time"] - res[1]["simulated_iteration_time"]) < 0)
    assert ("but simulated slower" in table) == contradicts
    # each chart's title gives the iteration time the table prints
    assert f"iteration {fmt_time(obscura['iteration_time'])} (optimizer step included)" in \
        (out / "obscura_measured.svg").read_text()
    # every file written is listed, each once
    listed = sorted(ln[len("wrote "):] for ln in table.splitlines() if ln.startswith("wrote "))
    assert listed == sorted([str(tmp_path / "cmp.json"), *(str(p) for p in out.rglob("*") if p.is_file())])
    # nothing else is left behind: no lock file beside --out, no temporary directory
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cmp.json", "demo"]


@pytest.mark.slow
def test_compare_on_two_processes_with_two_devices_each(tmp_path):
    """Process 0 writes the table, the JSON and the charts, with every stage's row
    and the process that ran it; the others write nothing. --check gathers every
    run's params from both processes."""
    from tests.obscura_jax.mp_helpers import TINY, run
    rc, text = run(["compare", *TINY, "--processes", "2", "--devices-per-process", "2", "--steps", "2",
                    "--schedules", "1f1b,obscura:adjusted=1:swap_blocks=1:swap_fraction=0.5", "--check",
                    "--out", str(tmp_path)], timeout=300)
    assert rc == 0, text[-3000:]
    # Gloo's connection lines went to the processes' logs (obscura_jax.processes.native_log)
    assert all(line.startswith(("[p0]", "obscura: started")) for line in text.splitlines()), text
    runs = json.loads((tmp_path / "compare.json").read_text())["runs"]
    assert [r["label"] for r in runs] == ["1f1b", "obscura:adjusted=1:swap_blocks=1:swap_fraction=0.5"]
    for r in runs:
        assert r["processes"] == 2 and [st["process"] for st in r["stages"]] == [0, 0, 1, 1]
        assert r["timeline"] is not None and r["simulated_iteration_time"] > 0
        assert r["check"]["equal"], r["check"]
    assert runs[0]["losses"] == pytest.approx(runs[1]["losses"], rel=1e-5)
    assert (tmp_path / "table.txt").exists() and (tmp_path / "measured.png").exists()


def test_check_marks_a_run_that_differs_and_exits_1(tmp_path, capsys, monkeypatch):
    """compare --check: each run's check line and column; a run that differs from the
    unpipelined model (here made to) is DIFFERENT, every output is still written, exit 1."""
    from obscura_jax.run import checks
    real = checks.check_against_reference

    def gpipe_differs(outcome, params=None):
        res = real(outcome, params)
        return {**res, "equal": res["equal"] and outcome.config.schedule != "gpipe"}
    monkeypatch.setattr(checks, "check_against_reference", gpipe_differs)
    out = tmp_path / "o"
    assert main(C + ["--schedules", "1f1b,gpipe", "--check", "--out", str(out)]) == 1
    printed = capsys.readouterr().out
    assert printed.count("check vs unpipelined model") == 2 and "(equal at" in printed
    row = {line.split()[0]: line.split()[-1] for line in printed.splitlines() if line.startswith(("1f1b ", "gpipe "))}
    assert row == {"1f1b": "equal", "gpipe": "DIFFERENT"}, printed
    runs = json.loads((out / "compare.json").read_text())["runs"]
    assert [r["check"]["equal"] for r in runs] == [True, False]
    assert (out / "table.txt").read_text().count("DIFFERENT") == 1


# ---- bad input, and SIGINT at random moments ----
from tests.obscura_jax.cli.commands import badinput  # noqa: E402

C = ["compare", "--model", "llama2-tiny", "--stages", "2", "--microbatches", "2", "--seq-len", "16",
     "--devices", "cpu:2", "--no-progress", "--cost-reps", "1", "--steps", "1"]
BAD = [
    (C + ["--schedules", "1f1b,foo", "--out", "{tmp}/o"], "unknown schedule 'foo'"),
    (C + ["--schedules", "", "--out", "{tmp}/o"], "--schedules is empty"),
    (C + ["--schedules", ",", "--out", "{tmp}/o"], "--schedules is empty"),
    (C + ["--schedules", "1f1b,", "--out", "{tmp}/o"], "--schedules '1f1b,' has an empty item"),
    (C + ["--schedules", "1f1b,1f1b", "--out", "{tmp}/o"], "--schedules lists '1f1b' twice"),
    (C + ["--schedules", "obscura:adjusted_policy=full+", "--out", "{tmp}/o"], "bad value 'full+' for adjusted_policy"),
    (C + ["--schedules", "obscura:swap_blocks=٣", "--out", "{tmp}/o"], "bad value '٣' for swap_blocks"),
    (C + ["--schedules", "1f1b", "--out", "{tmp}/notours", "--data", "{tmp}/notours/thesis.tex"],
     "thesis.tex lies inside --out"),
    (C + ["--schedules", "1f1b", "--swap-fraction", "7", "--out", "{tmp}/o"], "--swap-fraction must be in [0, 1]"),
    (C + ["--schedules", "1f1b:adjusted_policy=nosuchop", "--out", "{tmp}/o"], "unknown recompute op"),
    (C + ["--schedules", "1f1b:colour=red", "--out", "{tmp}/o"], "bad schedule option 'colour=red'"),
    (C + ["--schedules", "obscura:swap_fraction=x", "--out", "{tmp}/o"], "bad value 'x' for swap_fraction"),
    (C + ["--schedules", "1f1b", "--out", "/proc/o"], "--out /proc/o: cannot write there"),
    (C + ["--schedules", "1f1b", "--out", "{tmp}/afile"], "afile: is a file, not a directory"),
    (C + ["--schedules", "1f1b", "--out", "{tmp}/notours"], "holds files that are not a compare's outputs"),
    (C + ["--schedules", "1f1b", "--weight-decay", "nan", "--out", "{tmp}/o"], "--weight-decay must be finite"),
    (C + ["--schedules", "1f1b", "--microbatches", "100000", "--out", "{tmp}/o"], "--microbatches must be <= 4096"),
    (C + ["--schedules", "1f1b", "--lr", "-1", "--out", "{tmp}/o"], "--lr must be > 0"),
    (C + ["--schedules", "1f1b"], "the following arguments are required: --out"),
    # integers past their bounds, odd files
    (C + ["--schedules", "1f1b", "--seed", "-1", "--out", "{tmp}/o"], "--seed must be an integer in 0.."),
    (C + ["--schedules", "interleaved", "--virtual-stages", "100000", "--out", "{tmp}/o"],
     "--virtual-stages 100000 on 2 stages"),
    (C + ["--schedules", "1f1b", "--out", "/dev/null"], "--out /dev/null: is a character device, not a directory"),
    (C + ["--schedules", "1f1b", "--data", "{tmp}/fifo", "--out", "{tmp}/o"], "is a FIFO, not a regular file"),
    (C + ["--schedules", "1f1b", "--out", "{tmp}/o", "--json", "/proc/c.json"], "--json /proc/c.json: cannot write"),
    (C + ["--schedules", "1f1b", "--out", "{tmp}/o", "--json", "/dev/null"], "--json /dev/null"),
]


@pytest.mark.parametrize("argv,needle", BAD, ids=[" ".join(a[len(C):])[:50] for a, _ in BAD])
def test_bad_inputs_are_one_line_and_exit_2(capsys, tmp_path, monkeypatch, argv, needle):
    (tmp_path / "afile").write_text("x")
    (tmp_path / "notours").mkdir()
    (tmp_path / "notours" / "thesis.tex").write_text("x")
    os.mkfifo(tmp_path / "fifo")
    badinput.check(capsys, tmp_path, monkeypatch, argv, needle)
    assert not (tmp_path / "o").exists()


def test_an_out_another_compare_holds_is_refused(capsys, tmp_path, monkeypatch):
    """Two compares on one --out would both say "wrote": the second
    stops at once with one line naming the holder (the lock beside --out, as a
    checkpoint dir's)."""
    from obscura_jax.checkpoints.directory import DirectoryLock, beside_lock
    lock = DirectoryLock(tmp_path / "o", beside_lock(tmp_path / "o"), "--out")
    try:
        err = badinput.check(capsys, tmp_path, monkeypatch, C + ["--schedules", "1f1b", "--out", "{tmp}/o"],
                             f"--out {tmp_path}/o is in use by another run: pid {os.getpid()}")
    finally:
        lock.release()
    assert "wrote" not in err
