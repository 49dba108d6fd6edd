"""SIGTERM and faults on GPUs (`make test-gpu`; skipped without a GPU, the two-process
tests without two): SIGTERM stops a GPU run at a step's end, checkpointed, and
`--resume` continues the same curve; with one process a GPU, SIGTERM to one process
stops both at one step, a killed process stops the other at once, devices are named
p<process>:cuda:<id>, and no C++ log line reaches the terminal. The same paths as the
CPU tests (tests/obscura_jax/processes/test_faults.py, test_watchdog.py,
tests/obscura_jax/cli/test_sigterm.py), on NCCL and the GPU runtime's logging."""
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from obscura_jax.checkpoints.directory import MetricsLog
from tests.gpu.test_gpu_tier import _env

pytestmark = pytest.mark.gpu
TINY = ["--model", "llama2-tiny", "--stages", "2", "--microbatches", "4", "--micro-batch-size", "2",
        "--seq-len", "64", "--no-progress", "--cost-reps", "1"]
ABSL = re.compile(r"(\[p\d\] )?[IWEF]\d{4} \d\d:\d\d:\d\d")      # a C++ log line


def _gpus() -> int:
    import jax
    return sum(d.platform == "gpu" for d in jax.devices())


def _start(args: list[str]) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "obscura_jax", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=_env(), start_new_session=True)


def _until(ready, proc, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        if proc.poll() is not None or time.monotonic() > deadline:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
            raise AssertionError(f"not ready (rc {proc.returncode}):\n{out[-2000:]}\n{err[-2000:]}")
        time.sleep(0.1)


def _finish(proc, timeout: float = 300) -> tuple[int, str, str]:
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        raise AssertionError(f"still running after {timeout} s:\n{out[-2000:]}\n{err[-2000:]}")
    return proc.returncode, out, err


def _sigterm_then_resume(tmp_path: Path, extra: list[str], victim) -> tuple[dict, str]:
    """A run of `extra` stopped by SIGTERM to victim(proc) once 2 steps are logged,
    then resumed for 2 more steps; (its JSON, the stopped run's stderr)."""
    ck, out = tmp_path / "ck", tmp_path / "run.json"
    proc = _start(["train", *TINY, *extra, "--steps", "100000", "--checkpoint-dir", str(ck)])
    _until(lambda: len(MetricsLog(ck).entries()) >= 2, proc)
    victim(proc)
    rc, _, err = _finish(proc)
    assert rc == 143, err[-3000:]
    step = max(int(p.name) for p in ck.iterdir() if p.name.isdigit())
    rc, _, err2 = _finish(_start(["train", *TINY, *extra, "--steps", str(step + 2), "--checkpoint-dir", str(ck),
                                  "--resume", "--json", str(out)]))
    assert rc == 0, err2[-3000:]
    res = json.loads(out.read_text())
    assert res["steps"] == list(range(1, step + 3)) and res["before_resume"] == [True] * step + [False] * 2
    return res, err


def test_sigterm_on_the_gpu_checkpoints_and_resume_continues_the_curve(tmp_path):
    res, err = _sigterm_then_resume(tmp_path, ["--devices", "gpu"], lambda p: p.send_signal(signal.SIGTERM))
    assert err.strip().splitlines()[-1].startswith("obscura: terminated by SIGTERM; last complete checkpoint: step")
    whole = tmp_path / "whole.json"
    rc, _, err = _finish(_start(["train", *TINY, "--devices", "gpu", "--steps", str(res["steps"][-1]),
                                 "--json", str(whole)]))
    assert rc == 0, err[-3000:]
    np.testing.assert_allclose(res["losses"], json.loads(whole.read_text())["losses"], rtol=1e-5)


def test_two_gpu_processes_stop_together_on_sigterm_and_name_devices_by_process(tmp_path):
    if _gpus() < 2:
        pytest.skip("needs 2 GPUs")

    res, err = _sigterm_then_resume(tmp_path, ["--devices", "gpu", "--processes", "2"],
                                    lambda launcher: os.kill(_process(launcher, 1), signal.SIGTERM))
    assert res["devices"] == ["p0:cuda:0", "p1:cuda:1"] and res["processes"] == 2
    lines = err.splitlines()
    assert any(line.endswith("obscura: terminated: process 1 of 2 got SIGTERM; last complete checkpoint: step "
                             f"{res['start_step']} in {tmp_path / 'ck'} (continue with --resume)") for line in lines), err
    assert not any(ABSL.match(line) for line in lines), err                  # C++ logs went to the log files


def test_a_killed_gpu_process_stops_the_other_at_once(tmp_path):
    if _gpus() < 2:
        pytest.skip("needs 2 GPUs")
    ck = tmp_path / "ck"
    proc = _start(["train", *TINY, "--devices", "gpu", "--processes", "2", "--steps", "100000",
                   "--checkpoint-every", "100000", "--checkpoint-dir", str(ck)])
    _until(lambda: MetricsLog(ck).entries(), proc)
    os.kill(_process(proc, 1), signal.SIGKILL)
    killed = time.monotonic()
    rc, out, err = _finish(proc, 60)
    assert rc == 137 and time.monotonic() - killed < 20, err[-3000:]
    assert "obscura: error: process 1 of 2 ended by SIGKILL; stopping the others" in err.splitlines(), err
    assert not any(ABSL.match(line) for line in (out + err).splitlines()), out[-2000:] + err[-2000:]


def _process(launcher, rank: int) -> int:
    """The pid of the launcher's child that is process `rank` (its OBSCURA_PROCESS_ID),
    from /proc: the launcher's stdout is read only at the end."""
    for pid in Path(f"/proc/{launcher.pid}/task/{launcher.pid}/children").read_text().split():
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        if f"OBSCURA_PROCESS_ID={rank}".encode() in environ:
            return int(pid)
    raise AssertionError(f"no process {rank} under the launcher {launcher.pid}")
