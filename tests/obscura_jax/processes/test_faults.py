"""Faults of several processes as `obscura train --processes N` users meet them
(obscura_jax.processes.supervise, watchdog, coordinator, native_log): a killed process
stops the others at once, named in one line, and no Gloo line reaches the terminal
(it is in the run's logs); a stopped coordinator (SIGSTOP of process 0) is caught by
the others' watchdog and every process ends; a taken or unreachable coordinator is
one line of ours, not JAX's SIGSEGV or C++ abort."""
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from obscura_jax.processes.coordinator import check_port_free, probe
from obscura_jax.processes.launch import free_ports
from obscura_jax.checkpoints.directory import MetricsLog
from tests.obscura_jax.mp_helpers import ROOT, TINY, crash_report, launch

pytestmark = pytest.mark.slow
# two stages, one a process
TINY2 = [*TINY[:TINY.index("--stages")], "--stages", "2", "--microbatches", "2",
         *TINY[TINY.index("--microbatches") + 2:]]


def committed_steps(d) -> list[int]:
    return sorted(int(p.name) for p in d.iterdir() if p.is_dir() and p.name.isdigit()) if d.exists() else []


def wait_until(ready, launched, what: str, timeout: float = 300) -> float:
    """Poll `ready()` while the launcher runs; the time it came (since the launch)."""
    deadline = time.monotonic() + timeout
    while not ready():
        assert launched.proc.poll() is None and time.monotonic() < deadline, \
            f"no {what}:\n" + crash_report(launched.text())
        time.sleep(0.05)
    return time.monotonic() - launched.started


def ended(launched) -> tuple[dict, Path]:
    """The launcher's last line: each process's end, and the directory of their logs."""
    line = next(line for _, line in launched.lines if line.startswith("obscura: processes ended:"))
    parts, logs = line.split("ended: ", 1)[1].split("; their logs: ")
    return dict(p.split(" ", 1) for p in parts.split(", ")), Path(logs.strip())


def test_a_killed_process_stops_the_other_at_once_in_one_line_and_gloo_stays_in_the_log(tmp_path):
    """Process 1 of 2 SIGKILLed mid-run (a checkpoint every step, so mid-save as
    likely as not): every process ends within 20 s, exit 137 (128 + SIGKILL), one
    line names process 1; Gloo's connection lines (the checkpoints' collectives
    connect them) are in the processes' logs, none on the terminal; only complete
    checkpoint steps are left."""
    ck = tmp_path / "ck"
    launched = launch(["train", *TINY2, "--processes", "2", "--steps", "200", "--checkpoint-every", "1",
                       "--checkpoint-dir", str(ck)])
    pids = launched.pids()
    wait_until(lambda: len(committed_steps(ck)) >= 1, launched, "first checkpoint")
    os.kill(pids[1], signal.SIGKILL)
    killed_at = time.monotonic() - launched.started
    rc = launched.wait(120)
    text = launched.text()
    assert rc == 137, crash_report(text)
    assert launched.lines[-1][0] - killed_at < 20, text[-3000:]
    named = [line for _, line in launched.lines if re.search(r"\bprocess 1\b", line)]
    assert named == ["obscura: error: process 1 of 2 ended by SIGKILL; stopping the others\n"], text[-3000:]
    statuses, logs = ended(launched)
    assert statuses == {"0": "stopped by the launcher", "1": "SIGKILL"}
    assert "Gloo" not in text and "Traceback" not in text
    assert "[Gloo] Rank 0 is connected" in (logs / "p0.log").read_text()      # where the chatter went
    shutil.rmtree(logs)
    # a save cut short stays a temporary directory, never a step directory
    assert all(p.name.isdigit() or "orbax-checkpoint-tmp" in p.name for p in ck.iterdir() if p.is_dir())


def test_a_stopped_coordinator_is_caught_and_every_process_ends_within_90_s(tmp_path):
    """SIGSTOP of process 0, which hosts the key-value store the heartbeats use:
    process 1's watchdog gets no answer from the store within its limit (6 s here,
    15 s by default) and names process 0; the launcher then stops process 0."""
    ck = tmp_path / "ck"   # a metrics log (one line a step) says when the steps run; no checkpoint is saved
    launched = launch(["train", *TINY2, "--processes", "2", "--steps", "100000", "--checkpoint-every", "100000",
                       "--checkpoint-dir", str(ck)], env={"OBSCURA_HEARTBEAT_SECONDS": "6"})
    pids = launched.pids()
    wait_until(lambda: MetricsLog(ck).entries(), launched, "first step")
    os.kill(pids[0], signal.SIGSTOP)
    stopped_at = time.monotonic() - launched.started
    try:
        rc = launched.wait(150)
    finally:
        for pid in pids:                 # never leave a stopped process behind
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    text = launched.text()
    assert rc == 17, crash_report(text)
    named = [(t, line) for t, line in launched.lines if "lost process 0" in line]
    assert len(named) == 1 and "its coordination service did not answer for 6 s" in named[0][1], text[-3000:]
    assert launched.lines[-1][0] - stopped_at < 90, text[-3000:]
    statuses, logs = ended(launched)
    assert statuses == {"0": "stopped by the launcher", "1": "status 17"}
    shutil.rmtree(logs)


def test_a_taken_or_unreachable_coordinator_is_one_line(tmp_path):
    """Several hosts' flags, one process each (the others never come): process 0 on a
    taken port, process 1 toward a port nothing listens on, and toward a port another
    program holds. Each ends with one line and exit 2, where JAX would die of SIGSEGV
    (process 0) or abort with a C++ stack after its initialization timeout."""
    taken, refused = free_ports(2)
    held = socket.socket()
    held.bind(("127.0.0.1", taken))
    held.listen()
    with pytest.raises(Exception, match=f"coordinator port {taken} is taken"):
        check_port_free(f"127.0.0.1:{taken}")
    assert "connection refused" in probe(f"127.0.0.1:{refused}")
    cases = {0: (taken, f"coordinator port {taken} is taken on this host"),
             1: (refused, f"process 1 of 2 cannot reach the coordinator 127.0.0.1:{refused} after 3 s: "
                          "connection refused"),
             2: (taken, f"process 1 of 2 cannot reach the coordinator 127.0.0.1:{taken} after 3 s: something "
                        "listens there that is not JAX's coordination service")}
    procs = {}
    for case, (port, _) in cases.items():
        argv = ["train", *TINY2, "--steps", "1", "--coordinator", f"127.0.0.1:{port}", "--num-processes", "2",
                "--process-id", str(min(case, 1))]
        procs[case] = subprocess.Popen([sys.executable, "-m", "obscura_jax", *argv], cwd=ROOT, text=True,
                                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                                       env=dict(os.environ, OBSCURA_CONNECT_SECONDS="3",
                                                OBSCURA_LOG_FILE=str(tmp_path / f"case{case}.log")))
    try:
        for case, proc in procs.items():
            out, err = proc.communicate(timeout=180)
            lines = err.splitlines()
            assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith("obscura: error: "), (case, err)
            assert cases[case][1] in lines[0] and out == "", (case, out, err)
    finally:
        held.close()
        for proc in procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
