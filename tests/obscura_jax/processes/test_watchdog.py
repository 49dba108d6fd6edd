"""Faults across processes (obscura_jax.processes.watchdog, checkpoints/stop.py, through
`obscura train --processes 4`): SIGTERM to one process stops all four at the end of
the same step, checkpointed, each exiting 143 by itself with one line naming the
process that got it; `--resume` on 4 processes continues the uninterrupted loss
curve, its JSON holding the whole curve; a resume with another process count is
refused with one line; a hung process names itself. (A killed or stopped process:
test_faults.py.)"""
import json
import os
import signal
import time

import numpy as np
import pytest

from obscura_jax.runtime.placement import place_stages
from obscura_jax.run.run_config import RunConfig
from obscura_jax.run.trainer import train
from tests.obscura_jax.mp_helpers import FAULTS, TINY, crash_report, launch, remove_logs, run

pytestmark = pytest.mark.slow


def committed_steps(d) -> list[int]:
    return sorted(int(p.name) for p in d.iterdir() if p.is_dir() and p.name.isdigit()) if d.exists() else []


@pytest.fixture(scope="module")
def terminated(tmp_path_factory):
    """4 processes checkpointing every step; process 2 gets SIGTERM once step 2 is saved."""
    ck = tmp_path_factory.mktemp("faults") / "ck"
    launched = launch(["train", *TINY, "--processes", "4", "--steps", "200", "--checkpoint-every", "1",
                       "--checkpoint-dir", str(ck)])
    pids = launched.pids()
    deadline = time.monotonic() + 240
    while 2 not in committed_steps(ck):
        assert launched.proc.poll() is None and time.monotonic() < deadline, launched.text()[-3000:]
        time.sleep(0.05)
    os.kill(pids[2], signal.SIGTERM)
    rc = launched.wait(120)
    yield ck, rc, launched
    remove_logs(launched.text())


def test_sigterm_to_one_process_stops_all_at_one_step_checkpointed_naming_it(terminated):
    ck, rc, launched = terminated
    text = launched.text()
    assert rc == 143, crash_report(text)
    ended = [line for _, line in launched.lines if line.startswith("obscura: processes ended:")]
    assert ended, text[-3000:]
    statuses = dict(part.strip().split(" ", 1) for part in ended[0].split("ended:", 1)[1].split(";")[0].split(","))
    assert statuses == {str(r): "status 143" for r in range(4)}, ended[0]     # each stopped itself
    named = [line.split("] ", 1)[1] for _, line in launched.lines if "SIGTERM" in line]   # once, from any process
    step = committed_steps(ck)[-1]
    assert named == [f"obscura: terminated: process 2 of 4 got SIGTERM; last complete checkpoint: step {step} "
                     f"in {ck} (continue with --resume)\n"], text[-3000:]
    assert step > 2 and "Traceback" not in text


def test_resume_continues_the_curve_and_its_json_holds_all_of_it(terminated, tmp_path):
    ck, *_ = terminated
    last = committed_steps(ck)[-1]
    out = tmp_path / "resumed.json"
    rc, text = run(["train", *TINY, "--processes", "4", "--steps", str(last + 2), "--resume",
                    "--checkpoint-dir", str(ck), "--json", str(out), "--check"], timeout=240)
    assert rc == 0, crash_report(text)
    assert "check vs unpipelined model" in text and "(equal at rtol" in text      # params gathered from 4
    assert f"resumed from {ck} at step {last}" in text
    assert f"(steps 1-{last} before the resume, from the checkpoint's metrics log)" in text
    res = json.loads(out.read_text())
    assert res["steps"] == list(range(1, last + 3)) and res["start_step"] == last and res["processes"] == 4
    assert res["before_resume"] == [True] * last + [False, False]
    assert [st["process"] for st in res["stages"]] == [0, 1, 2, 3]
    assert res["devices"] == [f"p{r}:cpu:0" for r in range(4)]
    assert res["timeline"] is not None and len(res["timeline"]["stages"]) == 4
    whole = train(RunConfig(model="llama2-tiny", stages=4, microbatches=4, micro_batch_size=2, seq_len=16,
                            steps=last + 2, measure_costs=False, record_timeline=False),
                  lambda p: place_stages(p, "cpu", 4), log=lambda *_: None)
    np.testing.assert_allclose(res["losses"], [s.loss for s in whole.steps], rtol=1e-5)


def test_resuming_with_another_process_count_is_refused_in_one_line(terminated):
    ck, *_ = terminated
    last = committed_steps(ck)[-1]
    for extra, have in ((["--processes", "2", "--devices-per-process", "2"], 2), (["--devices", "cpu:4"], 1)):
        args = ["train", *[a for a in TINY if a != "cpu" and a != "--devices"], *extra,
                "--steps", str(last + 5), "--resume", "--checkpoint-dir", str(ck)]
        rc, text = run(args, timeout=180)
        errors = [line for line in text.splitlines() if "error:" in line]
        assert rc == 2, text[-2000:]
        assert len(errors) == 1 and f"checkpoint has process count 4, this run has {have}" in errors[0], text
        assert "obscura: started" not in text, text       # refused before a process started


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
    assert "2 status 19" in ended and "SIGKILL" not in ended, ended     # the hung one named and stopped itself
    remove_logs(launched.text())
