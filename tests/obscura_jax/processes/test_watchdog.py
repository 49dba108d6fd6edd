"""Faults across processes (obscura_jax.processes.watchdog, through `obscura train --processes 4`):
a process SIGKILLed mid-run stops every other one within 60 s, each by its own
watchdog (exit status 17/18, not killed by the launcher), with a line naming the lost
process; the checkpoint directory holds only complete steps; `--resume` on 4
processes continues the uninterrupted loss curve, and a resume with another process
count is refused with one line."""
import json
import os
import signal
import time

import numpy as np
import pytest

from obscura_jax.runtime.placement import place_stages
from obscura_jax.run.run_config import RunConfig
from obscura_jax.run.trainer import train
from tests.obscura_jax.mp_helpers import FAULTS, TINY, crash_report, launch, run

pytestmark = pytest.mark.slow


def committed_steps(d) -> list[int]:
    return sorted(int(p.name) for p in d.iterdir() if p.is_dir() and p.name.isdigit()) if d.exists() else []


@pytest.fixture(scope="module")
def killed(tmp_path_factory):
    """4 processes checkpointing every step; process 2 SIGKILLed once step 2 is saved."""
    ck = tmp_path_factory.mktemp("faults") / "ck"
    launched = launch(["train", *TINY, "--processes", "4", "--steps", "200", "--checkpoint-every", "1",
                       "--checkpoint-dir", str(ck)], env={"OBSCURA_HEARTBEAT_SECONDS": "6"})  # default 15: CI time
    pids = launched.pids()
    deadline = time.monotonic() + 240
    while 2 not in committed_steps(ck):
        assert launched.proc.poll() is None and time.monotonic() < deadline, launched.text()[-3000:]
        time.sleep(0.05)
    os.kill(pids[2], signal.SIGKILL)
    killed_at = time.monotonic() - launched.started
    rc = launched.wait(120)
    return ck, rc, killed_at, launched


def test_a_killed_process_stops_the_others_within_60_s_naming_it(killed):
    _, rc, killed_at, launched = killed
    assert rc != 0
    text = launched.text()
    ended = [line for _, line in launched.lines if line.startswith("obscura: processes ended:")]
    assert ended, text[-3000:]
    statuses = dict(part.strip().split(" ", 1) for part in ended[0].split("ended:", 1)[1].split(","))
    assert statuses["2"] == "SIGKILL"
    for rank in ("0", "1", "3"):      # each stopped itself: a watchdog status, not the launcher's kill
        assert statuses[rank] in ("status 17", "status 18"), ended[0]
    named = [(t, line) for t, line in launched.lines if "lost process 2" in line]
    assert named, text[-3000:]
    assert all(t - killed_at < 60 for t, _ in named)
    assert launched.lines[-1][0] - killed_at < 60
    assert "Traceback" not in text


def test_only_complete_steps_are_left_and_resume_continues_the_curve(killed, tmp_path):
    ck, *_ = killed
    done = committed_steps(ck)
    assert done and done[-1] >= 2
    # a save cut short stays a temporary directory, never a step directory
    # (beside them: the metrics log and the lock file, both plain files)
    assert all(p.name.isdigit() or "orbax-checkpoint-tmp" in p.name for p in ck.iterdir() if p.is_dir()), \
        list(ck.iterdir())
    assert {p.name for p in ck.iterdir() if not p.is_dir()} <= {"metrics.jsonl", ".obscura.lock"}, list(ck.iterdir())
    last = done[-1]
    out = tmp_path / "resumed.json"
    rc, text = run(["train", *TINY, "--processes", "4", "--steps", str(last + 2), "--resume",
                    "--checkpoint-dir", str(ck), "--json", str(out), "--check"], timeout=240)
    assert rc == 0, crash_report(text)
    assert "check vs unpipelined model" in text and "(equal at rtol" in text      # params gathered from 4
    assert f"resumed from {ck} at step {last}" in text
    assert not any("tmp" in p.name for p in ck.iterdir())     # the cut-short save was cleaned up
    res = json.loads(out.read_text())
    assert res["steps"] == [last + 1, last + 2] and res["processes"] == 4
    assert [st["process"] for st in res["stages"]] == [0, 1, 2, 3]
    assert res["timeline"] is not None and len(res["timeline"]["stages"]) == 4
    whole = train(RunConfig(model="llama2-tiny", stages=4, microbatches=4, micro_batch_size=2, seq_len=16,
                            steps=last + 2, measure_costs=False, record_timeline=False),
                  lambda p: place_stages(p, "cpu", 4), log=lambda *_: None)
    np.testing.assert_allclose(res["losses"], [s.loss for s in whole.steps][last:], rtol=1e-5)


def test_resuming_with_another_process_count_is_refused_in_one_line(killed):
    ck, *_ = killed
    last = committed_steps(ck)[-1]
    for extra, have in ((["--processes", "2", "--devices-per-process", "2"], 2), (["--devices", "cpu:4"], 1)):
        args = ["train", *[a for a in TINY if a != "cpu" and a != "--devices"], *extra,
                "--steps", str(last + 5), "--resume", "--checkpoint-dir", str(ck)]
        rc, text = run(args, timeout=180)
        errors = [line for line in text.splitlines() if "error:" in line]
        assert rc == 2, text[-2000:]
        assert len(errors) == 1 and f"checkpoint has process count 4, this run has {have}" in errors[0], text


def test_a_hung_process_names_itself_and_stops_the_others_within_60_s(tmp_path):
    """Process 2 stops making progress after step 2 (tests/obscura_jax/faults.py) while its watchdog
    still beats: it names itself once its step allowance is over (5 s here, 30 s by
    default), and the others, waiting on it, stop with the same line."""
    ck = tmp_path / "ck"
    launched = launch(["train", *TINY, "--processes", "4", "--steps", "200", "--checkpoint-every", "1",
                       "--checkpoint-dir", str(ck), *FAULTS],
                      env={"OBSCURA_TEST_HANG": "2:2", "OBSCURA_STEP_STALL_SECONDS": "5"})
    deadline = time.monotonic() + 240
    while 2 not in committed_steps(ck):
        assert launched.proc.poll() is None and time.monotonic() < deadline, launched.text()[-3000:]
        time.sleep(0.05)
    hung_at = time.monotonic() - launched.started
    assert launched.wait(120) != 0
    named = [(t, line) for t, line in launched.lines if "process 2 made no progress for" in line]
    assert named and "after step 2" in named[0][1], launched.text()[-3000:]
    assert named[0][0] - hung_at < 60 and launched.lines[-1][0] - hung_at < 60
    ended = next(line for _, line in launched.lines if line.startswith("obscura: processes ended:"))
    assert "SIGKILL" not in ended, ended          # every process stopped itself
