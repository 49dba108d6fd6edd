"""scripts/bench/suite_cpu.py and its plugin tests/cpu_report.py: each test's CPU seconds,
its own process's and its waited-for children's, reach the report and the printed
tables; pytest's exit status is passed on; bad options get one line and exit 2.
The children's CPU is made by a child that spins until its own CPU clock says so: the
bound holds at any machine speed."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "bench" / "suite_cpu.py"
TESTS = '''
import subprocess, sys, time

SPIN = "import time\\nwhile time.process_time() < 0.3: pass"

def test_spawns_a_busy_child():
    subprocess.run([sys.executable, "-c", SPIN], check=True, timeout=120)

def test_spins_itself():
    t0 = time.process_time()
    while time.process_time() - t0 < 0.2:
        pass

def test_fails_when_asked():
    import os
    assert os.environ.get("FAIL_ONE") != "1"
'''


def _run(*args: str, env_extra: dict | None = None) -> subprocess.CompletedProcess:
    import os
    env = dict(os.environ, **(env_extra or {}))
    env.pop("OBSCURA_CPU_REPORT", None)     # the script sets it for its own pytest
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          cwd=ROOT, env=env, timeout=300)


@pytest.fixture
def tiny_suite(tmp_path) -> Path:
    path = tmp_path / "test_tiny.py"
    path.write_text(TESTS)
    return path


def test_each_tests_own_and_childrens_cpu_reach_the_report(tmp_path, tiny_suite):
    report = tmp_path / "cpu.jsonl"
    out = _run("--report", str(report), "--top", "5", "--", "-q", "-p", "no:cacheprovider", str(tiny_suite))
    assert out.returncode == 0, out.stdout + out.stderr
    rows = {r["test"].split("::")[-1]: r for r in map(json.loads, report.read_text().splitlines())}
    assert set(rows) == {"test_spawns_a_busy_child", "test_spins_itself", "test_fails_when_asked"}
    assert rows["test_spawns_a_busy_child"]["children_s"] >= 0.3
    assert rows["test_spins_itself"]["self_s"] >= 0.2
    assert rows["test_spins_itself"]["children_s"] < 0.3     # not the child the test before waited for
    assert "pytest exit 0" in out.stdout
    assert "3 tests" in out.stdout
    tests_table, _ = _tables(out.stdout.split("report ", 1)[1])
    assert tests_table[0][-1].endswith("test_spawns_a_busy_child")     # the heaviest first: the child's 0.3 s


def test_pytests_exit_status_is_passed_on(tmp_path, tiny_suite):
    out = _run("--report", str(tmp_path / "cpu.jsonl"), "--", "-q", "-p", "no:cacheprovider", str(tiny_suite),
               env_extra={"FAIL_ONE": "1"})
    assert out.returncode == 1
    assert "pytest exit 1" in out.stdout


def test_read_prints_an_earlier_report_and_runs_nothing(tmp_path):
    report = tmp_path / "cpu.jsonl"
    rows = [{"test": "tests/a.py::t1", "module": "tests/a.py", "self_s": 1.0, "children_s": 4.0,
             "wall_s": 2.0, "worker": "gw0"},
            {"test": "tests/a.py::t2", "module": "tests/a.py", "self_s": 2.0, "children_s": 0.0,
             "wall_s": 2.0, "worker": "gw0"},
            {"test": "tests/b.py::t3", "module": "tests/b.py", "self_s": 3.0, "children_s": 0.0,
             "wall_s": 3.0, "worker": "gw1"}]
    report.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = _run("--read", str(report), "--top", "2")
    assert out.returncode == 0, out.stderr
    assert "3 tests, 10 CPU-s" in out.stdout
    tests_table, modules_table = _tables(out.stdout)
    assert [row[-1] for row in tests_table] == ["tests/a.py::t1", "tests/b.py::t3"]     # --top 2, heaviest first
    assert modules_table[0] == ["7.0", "4.0", "2", "tests/a.py"]


def _tables(stdout: str) -> list[list[list[str]]]:
    """The printed tables (blocks under a "CPU s" header), each as rows of fields."""
    blocks = [b.strip().splitlines() for b in stdout.split("\n\n")]
    return [[line.split() for line in b[1:]] for b in blocks if b and b[0].lstrip().startswith("CPU s")]


@pytest.mark.parametrize("args, says", [(["--read", "no-such.jsonl"], "no such file"),
                                        (["--top", "0", "--read", "x"], "--top must be >= 1")])
def test_bad_options_get_one_line_and_exit_2(tmp_path, args, says):
    out = _run(*args)
    assert out.returncode == 2
    assert says in out.stderr
    assert "Traceback" not in out.stderr


def test_defaults_to_make_tests_flags():
    """With no PYTEST_ARGS the script measures the suite as `make test` runs it."""
    import suite_cpu

    from tests.tooling.test_suite_order import make_xdist_flags
    assert suite_cpu.make_test_args() == ["-q", *make_xdist_flags()]


def _row(test: str, cpu: float) -> dict:
    return {"test": test, "module": test.split("::")[0], "self_s": cpu, "children_s": 0.0, "wall_s": cpu,
            "worker": "gw0"}


def test_against_matches_a_test_by_path_or_by_its_files_name_when_its_folder_moved():
    """The same path and id; a file that moved folders; a name two files share (not
    matched: which one moved is not known); a test only one side holds."""
    import suite_cpu

    before = [_row("tests/a/test_x.py::t1", 1.0), _row("tests/test_y.py::t2", 2.0),
              _row("tests/p/test_z.py::t3", 3.0), _row("tests/q/test_z.py::t3", 4.0), _row("tests/test_gone.py::t", 5.0)]
    after = [_row("tests/a/test_x.py::t1", 1.5), _row("tests/moved/test_y.py::t2", 1.0),
             _row("tests/r/test_z.py::t3", 3.0), _row("tests/s/test_z.py::t3", 4.0), _row("tests/test_new.py::t", 6.0)]
    pairs, only_before, only_after = suite_cpu.match_tests(before, after)
    assert pairs == [("tests/a/test_x.py::t1", "tests/a/test_x.py::t1"),
                     ("tests/test_y.py::t2", "tests/moved/test_y.py::t2")]
    assert only_before == {"tests/p/test_z.py::t3", "tests/q/test_z.py::t3", "tests/test_gone.py::t"}
    assert only_after == {"tests/r/test_z.py::t3", "tests/s/test_z.py::t3", "tests/test_new.py::t"}
    text = suite_cpu.comparison(before, after, top=5)
    assert text.splitlines()[:3] == ["tests in both: 2, 3 CPU-s before, 2 after (0.83x)",
                                     "only after: 3 tests, 13 CPU-s", "only before: 3 tests, 12 CPU-s"]


def test_against_through_the_command_line(tmp_path):
    """The two reports compared, one of them gzipped (as the kept ones are); --against
    alone, or naming no file, is one line and exit 2."""
    import gzip
    before, after = tmp_path / "before.jsonl.gz", tmp_path / "after.jsonl"
    before.write_bytes(gzip.compress((json.dumps(_row("tests/test_a.py::t", 2.0)) + "\n").encode()))
    after.write_text(json.dumps(_row("tests/sub/test_a.py::t", 1.0)) + "\n" + json.dumps(_row("tests/test_b.py::u", 4.0)) + "\n")
    out = _run("--read", str(after), "--against", str(before))
    assert out.returncode == 0, out.stderr
    assert "tests in both: 1, 2 CPU-s before, 1 after (0.50x)" in out.stdout
    assert "only after: 1 tests, 4 CPU-s" in out.stdout
    refused = _run("--against", str(before))
    assert refused.returncode == 2 and "--against needs --read" in refused.stderr
    missing = _run("--read", str(after), "--against", str(tmp_path / "none.jsonl"))
    assert missing.returncode == 2 and "--against: no such file" in missing.stderr


@pytest.mark.parametrize("content", [b"not json\n", b"\x1f\x8b garbage", b'{"test": "t"}\n'])
def test_a_file_that_is_no_report_is_one_line_and_exit_2(tmp_path, content):
    bad = tmp_path / ("bad.jsonl.gz" if content.startswith(b"\x1f") else "bad.jsonl")
    bad.write_bytes(content)
    good = tmp_path / "good.jsonl"
    good.write_text(json.dumps(_row("tests/test_a.py::t", 1.0)) + "\n")
    for args in (["--read", str(bad)], ["--read", str(good), "--against", str(bad)]):
        out = _run(*args)
        assert out.returncode == 2, (args, out.stdout, out.stderr)
        assert "not a CPU report" in out.stderr and "Traceback" not in out.stderr


def test_a_reader_that_stops_early_ends_it_quietly():
    """`suite_cpu.py --read REPORT | head`: the tables are longer than a pipe holds,
    the reader goes away, and the script stops without a traceback."""
    report = ROOT / "results" / "suite_cpu" / "e2f45cd_1.jsonl.gz"
    proc = subprocess.Popen([sys.executable, str(SCRIPT), "--read", str(report), "--top", "5000"], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout.readline()
    proc.stdout.close()
    try:
        err = proc.stderr.read().decode()
        rc = proc.wait(timeout=120)
    finally:
        proc.kill()
    assert "Traceback" not in err and "BrokenPipe" not in err, err
    assert rc == 141
