"""`obscura train` and device memory, end to end: a run over --device-memory is
refused in one line before anything compiles (exit 2); an out-of-memory inside a
stage worker (injected: OBSCURA_TEST_OUT_OF_MEMORY, obscura_jax.runtime.out_of_memory)
is one line naming the device, the program and the run's estimate, exit 2, with the
checkpoint written before it intact and resumable; across 2 processes the same line
stops both."""
import os
import subprocess
import sys

from obscura_jax.cli.main import main
from obscura_jax.runtime import out_of_memory
from tests.obscura_jax.mp_helpers import ROOT, TINY, crash_report, run

BASE = ["train", "--model", "llama2-tiny", "--stages", "4", "--microbatches", "4",
        "--micro-batch-size", "2", "--seq-len", "16", "--devices", "cpu:4", "--no-progress",
        "--cost-reps", "1"]


def error_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if "obscura: error:" in line or "internal error" in line]


def test_a_run_over_device_memory_is_refused_in_one_line_before_compiling(tmp_path):
    """The default flags (llama2-tiny, 1F1B on 4 stages) with a declared limit; JAX
    logs every compilation it starts (JAX_LOG_COMPILES), and none did."""
    out = tmp_path / "run.json"
    proc = subprocess.run([sys.executable, "-m", "obscura_jax", "train", "--device-memory", "1MiB", "--no-progress",
                           "--json", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, JAX_LOG_COMPILES="1"))
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-3000:]
    errors = error_lines(proc.stderr)
    assert len(errors) == 1 and errors[0] == proc.stderr.strip().splitlines()[-1], proc.stderr[-3000:]
    line = errors[0]
    assert line.startswith("obscura: error: device cpu:0 needs ~") and "(stage 0: " in line, line
    assert "the largest term) but its allocator holds 1.0 MiB (--device-memory); " in line, line
    assert line.endswith("or give --force to try anyway"), line
    assert "Compiling" not in proc.stderr and "Traceback" not in proc.stderr and not out.exists()


def test_an_out_of_memory_in_a_worker_is_one_line_and_keeps_the_checkpoint(tmp_path, capsys, monkeypatch):
    ckpt, out = tmp_path / "ckpt", tmp_path / "run.json"
    monkeypatch.setattr(out_of_memory, "_HOOK", out_of_memory._Hook())      # this test's own count
    monkeypatch.setenv(out_of_memory.TEST_HOOK, "2F3@2")                  # F3 of stage 2, in step 2
    assert main(BASE + ["--steps", "3", "--checkpoint-dir", str(ckpt), "--checkpoint-every", "1",
                        "--json", str(out)]) == 2
    err = capsys.readouterr().err
    errors = error_lines(err)
    assert len(errors) == 1, err
    line = errors[0]
    assert line.startswith("obscura: error: device cpu:2 ran out of memory in F3 of stage 2 (RESOURCE_EXHAUSTED:"), line
    assert "; the run's estimate for cpu:2 was ~" in line and "--stages" in line, line   # steps: weights lead
    assert not out.exists() and sorted(p.name for p in ckpt.iterdir() if p.name.isdigit()) == ["1"]
    monkeypatch.delenv(out_of_memory.TEST_HOOK)
    assert main(BASE + ["--steps", "2", "--checkpoint-dir", str(ckpt), "--resume", "--json", str(out)]) == 0
    assert f"resumed from {ckpt} at step 1" in capsys.readouterr().out and out.exists()


def test_an_out_of_memory_on_one_of_two_processes_stops_both_with_its_line():
    rc, text = run(["train", *TINY, "--processes", "2", "--devices-per-process", "2", "--steps", "2"],
                   timeout=300, env={out_of_memory.TEST_HOOK: "2F1"})
    errors = {line.split("] ", 1)[-1] for line in error_lines(text)}
    assert rc == 2, crash_report(text)
    assert len(errors) == 1, crash_report(text)
    line = errors.pop()
    assert line.startswith("obscura: error: process 1: device cpu:") and "ran out of memory in F1 of stage 2" in line
    assert "the run's estimate for cpu:" in line and "Traceback" not in text, crash_report(text)
