"""scripts/bench/busy_load.py (make test-busy): the burners run while the command does and
are gone after it, whatever ended it: its own exit (status passed on), the timeout
(124, the command killed), or busy_load itself SIGKILLed (each burner stops once its
parent is gone). Every process here is bounded by a timeout."""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench" / "busy_load.py"
# the command: writes the burners' pids, those alive, and its own pid to argv[1], then exits argv[2]
# or, with argv[2] == "sleep", sleeps (the caller ends it)
REPORT = """
import os, sys, time
pids = [int(p) for p in os.environ["OBSCURA_BUSY_PIDS"].split(",") if p]
alive = []
for p in pids:
    try:
        os.kill(p, 0)
        alive.append(p)
    except ProcessLookupError:
        pass
open(sys.argv[1] + ".tmp", "w").write(" ".join(map(str, pids)) + "\\n" + " ".join(map(str, alive))
                                      + "\\n" + str(os.getpid()))
os.replace(sys.argv[1] + ".tmp", sys.argv[1])
if sys.argv[2] == "sleep":
    time.sleep(600)
sys.exit(int(sys.argv[2]))
"""


def _busy(tmp_path, end: str, *opts: str, procs: int = 3) -> list[str]:
    return [sys.executable, str(SCRIPT), "--procs", str(procs), *opts, "--",
            sys.executable, "-c", REPORT, str(tmp_path / "pids"), end]


def _pids(tmp_path) -> tuple[list[int], list[int]]:
    started, alive, _ = (tmp_path / "pids").read_text().split("\n")
    return [int(p) for p in started.split()], [int(p) for p in alive.split()]


def _gone(pid: int) -> bool:
    """No such process, or a zombie (ended, its new parent has not reaped it yet)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (FileNotFoundError, ProcessLookupError):
        return True


def _wait_gone(pids: list[int], timeout: float = 60) -> list[int]:
    """The pids still there after `timeout` seconds (a bound, not a measurement)."""
    deadline = time.monotonic() + timeout
    while any(not _gone(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return [p for p in pids if not _gone(p)]


@pytest.mark.parametrize("status", [0, 3])
def test_burners_run_beside_the_command_and_stop_with_it(tmp_path, status):
    r = subprocess.run(_busy(tmp_path, str(status)), capture_output=True, text=True, timeout=120)
    assert r.returncode == status, r.stderr
    started, alive = _pids(tmp_path)
    assert len(started) == 3 and alive == started
    assert [p for p in started if not _gone(p)] == []      # reaped by busy_load before it exited


def test_a_command_past_the_timeout_is_killed_with_124(tmp_path):
    # 4 s: for the command (a bare interpreter, no imports but the standard library's) to start and
    # report, a bound that holds at load 10; then it sleeps for 600.
    # No burners (each would spin a core all 10 s; the tests above and below check them)
    r = subprocess.run(_busy(tmp_path, "sleep", "--timeout", "4", procs=0), capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 124 and "still running after 4 s" in r.stderr, r.stderr
    command = int((tmp_path / "pids").read_text().split("\n")[2])
    assert _wait_gone([command]) == []


def test_burners_stop_by_themselves_when_busy_load_is_killed(tmp_path):
    proc = subprocess.Popen(_busy(tmp_path, "sleep"), start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not (tmp_path / "pids").exists():      # the command reports once the burners run
            assert proc.poll() is None and time.monotonic() < deadline, "no pids reported"
            time.sleep(0.05)
        started, alive = _pids(tmp_path)
        assert alive == started
        os.kill(proc.pid, signal.SIGKILL)            # no finally of its own runs
        proc.wait(60)
        assert _wait_gone(started) == []
    finally:
        proc.kill()
        proc.wait(60)
        if (tmp_path / "pids").exists():             # the command, asleep in a session of its own
            try:
                os.kill(int((tmp_path / "pids").read_text().split("\n")[2]), signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_a_command_is_required():
    r = subprocess.run([sys.executable, str(SCRIPT), "--procs", "2"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "COMMAND" in r.stderr
