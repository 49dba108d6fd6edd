"""SIGTERM, which batch schedulers send before preemption, handled as Ctrl-C is
(obscura_jax.cli.interrupt, checkpoints/stop.py), through the real entry point:
`train` finishes its step, checkpoints it and exits 143 with one line naming it, and
`--resume` continues with the losses of a run that never stopped, its JSON holding
the whole curve; plan, compare and sweep exit 143 with one line and leave no
output behind."""
import json
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from obscura_jax.checkpoints.directory import MetricsLog
from obscura_jax.runtime.placement import place_stages
from obscura_jax.run.run_config import RunConfig
from obscura_jax.run.trainer import train
from tests.obscura_jax.cli.commands.test_compare import C
from tests.obscura_jax.mp_helpers import ROOT, stacks_of_a_hung_process, start_ready

pytestmark = pytest.mark.slow
TRAIN = ["train", "--model", "llama2-tiny", "--stages", "2", "--microbatches", "2", "--seq-len", "16",
         "--devices", "cpu:2", "--no-progress", "--cost-reps", "1"]


def _end(proc, timeout: float = 120) -> tuple[int, str]:
    try:
        _, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"no end within {timeout:.0f} s of SIGTERM:\n" + stacks_of_a_hung_process(proc))
    return proc.returncode, err


def test_sigterm_checkpoints_the_last_step_and_resume_continues_the_curve(tmp_path):
    """SIGTERM once two steps are logged (no --checkpoint-every: the end's checkpoint
    would be step 200): exit 143, one line naming the step it ended at, whose
    checkpoint is complete; no JSON. The resumed run's JSON: every step from 1, the
    earlier ones marked, equal to an uninterrupted run's losses."""
    ck, out = tmp_path / "ck", tmp_path / "run.json"
    proc, _ = start_ready([*TRAIN, "--steps", "200", "--checkpoint-dir", str(ck), "--json", str(out)],
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while len(MetricsLog(ck).entries()) < 2:
        if proc.poll() is not None or time.monotonic() > deadline:
            raise AssertionError("no second step:\n" + stacks_of_a_hung_process(proc))
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    rc, err = _end(proc)
    assert rc == 143, err[-2000:]
    (line,) = err.strip().splitlines()
    step = int(line.split("step ")[1].split()[0])
    assert line == (f"obscura: terminated by SIGTERM; last complete checkpoint: step {step} in {ck} "
                    "(continue with --resume)")
    assert step >= 3 and (ck / str(step)).is_dir() and not out.exists()
    assert [e["step"] for e in MetricsLog(ck).entries()] == list(range(1, step + 1))
    resumed = subprocess.run([sys.executable, "-m", "obscura_jax", *TRAIN, "--steps", str(step + 2),
                              "--checkpoint-dir", str(ck), "--resume", "--json", str(out)],
                             cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    res = json.loads(out.read_text())
    assert res["steps"] == list(range(1, step + 3)) and res["start_step"] == step
    assert res["before_resume"] == [True] * step + [False, False]
    whole = train(RunConfig(model="llama2-tiny", stages=2, microbatches=2, micro_batch_size=2, seq_len=16,
                            steps=step + 2, measure_costs=False, record_timeline=False),
                  lambda p: place_stages(p, "cpu", 2), log=lambda *_: None)
    np.testing.assert_allclose(res["losses"], [s.loss for s in whole.steps], rtol=1e-5)


def test_sigterm_to_plan_compare_and_sweep_is_one_line_143_and_no_output(tmp_path):
    """plan and sweep get SIGTERM as soon as their handler is there (their imports:
    the path through obscura_jax/__main__.py), compare once its run is under way (its
    temporary output directory is there): each exits 143 with one line, and leaves
    nothing but compare's lock file (empty, kept: obscura_jax/checkpoints/directory.py)."""
    cmp_out = tmp_path / "cmp"
    commands = {
        "plan": (["plan", "--profile", "results/h200/profile_llama2-13b.json", "--stages", "8", "--microbatches",
                  "32", "--memory-limit", "80GiB", "--json", str(tmp_path / "plan.json")], [tmp_path / "plan.json"]),
        "sweep": (["sweep", "--model", "llama2-13b", "--seq-len", "2048", "--gpus", "64", "--csv",
                   str(tmp_path / "s.csv"), "--json", str(tmp_path / "s.json")], [tmp_path / "s.csv",
                                                                                 tmp_path / "s.json"]),
        "compare": ([*C, "--schedules", "1f1b", "--steps", "200", "--out", str(cmp_out)], [cmp_out]),
    }
    for name, (argv, outputs) in commands.items():
        proc, _ = start_ready(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if name == "compare":     # under way: it made the temporary directory its runs write into
            deadline = time.monotonic() + 300
            while not any(p.name.startswith(".cmp.partial-") for p in tmp_path.iterdir()):
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError("compare never got under way:\n" + stacks_of_a_hung_process(proc))
                time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        rc, err = _end(proc)
        assert rc == 143 and err.strip().splitlines() == ["obscura: terminated by SIGTERM"], (name, err[-2000:])
        assert not any(p.exists() for p in outputs), name
    assert sorted(p.name for p in tmp_path.iterdir()) == []   # no temporary file or directory, no lock file
