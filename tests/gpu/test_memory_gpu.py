"""The memory check on a GPU (`make test-gpu`; skipped without one): a run over the
allocator's limit (a low XLA_PYTHON_CLIENT_MEM_FRACTION in the run's environment) is
refused in one line before anything compiles; the same with --force runs out of
memory and says so in one line (exit 2, never "internal error"); a run the check
admits at ~95% of its limit completes, its device peak at most the estimate.

The runs' size comes from the estimate itself: one sizing run records it
(`memory` in its JSON, with memory_stats' bytes_limit under a known fraction, which
gives the device's memory), and the limits of the others are fractions of it."""
import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.gpu

# llama2-7b shapes, 2 layers over 2 stages, GPipe (every forward before the
# backwards): weights ~10.7 GB, activations a few GB
RUN = ["train", "--model", "llama2-7b", "--layers", "2", "--compute-dtype", "bfloat16", "--stages", "2",
       "--schedule", "gpipe", "--microbatches", "8", "--micro-batch-size", "1", "--seq-len", "2048",
       "--devices", "gpu", "--steps", "2", "--no-progress", "--cost-reps", "1"]
SIZING_FRACTION = 0.5


def _obscura(args: list[str], fraction: float | None, timeout: float, **env) -> subprocess.CompletedProcess:
    full = dict(os.environ, XLA_PYTHON_CLIENT_PREALLOCATE="false", **env)
    full.pop("XLA_FLAGS", None)                       # no CPU-emulation flags from the test session
    full["PYTHONPATH"] = os.getcwd() + os.pathsep + full.get("PYTHONPATH", "")
    if fraction is not None:
        full["XLA_PYTHON_CLIENT_MEM_FRACTION"] = f"{fraction:.6f}"
    return subprocess.run([sys.executable, "-m", "obscura_jax", *args], capture_output=True, text=True,
                          timeout=timeout, env=full)


def _errors(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith(("obscura: error:", "obscura: internal error"))]


@pytest.fixture(scope="module")
def sizing(tmp_path_factory):
    """(the run's estimate in bytes, the device's memory in bytes) from one run."""
    out = tmp_path_factory.mktemp("sizing") / "run.json"
    proc = _obscura([*RUN, "--json", str(out)], SIZING_FRACTION, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    device, = json.loads(out.read_text())["memory"]["devices"]
    assert device["limit_source"] == "memory_stats bytes_limit", device
    return device["predicted_bytes"], device["limit_bytes"] / SIZING_FRACTION


def test_a_run_over_the_limit_is_refused_in_one_line_before_compiling():
    """1% of the device cannot hold the weights: refused from the traced figures,
    before JAX compiles anything (JAX_LOG_COMPILES logs every compilation), within
    the 30 s the acceptance names (a bound on the process, which includes JAX's start)."""
    proc = _obscura(RUN, 0.01, timeout=30, JAX_LOG_COMPILES="1")
    errors = _errors(proc.stderr)
    assert proc.returncode == 2 and len(errors) == 1, proc.stderr[-3000:]
    line = errors[0]
    assert line.startswith("obscura: error: device gpu:0 needs ~") and "the largest term) but its allocator holds" in line
    assert "(memory_stats bytes_limit)" in line and line.endswith("or give --force to try anyway"), line
    assert "Compiling" not in proc.stderr and "Traceback" not in proc.stderr


def test_forced_over_the_limit_is_one_out_of_memory_line(sizing):
    predicted, total = sizing
    proc = _obscura([*RUN, "--force"], 0.75 * predicted / total, timeout=600)
    errors = _errors(proc.stderr)
    assert proc.returncode == 2 and len(errors) == 1, proc.stdout[-2000:] + proc.stderr[-4000:]
    line = errors[0]
    assert line.startswith("obscura: error: device gpu:0 ran out of memory in ") and "RESOURCE_EXHAUSTED" in line
    assert "the run's estimate for gpu:0 was ~" in line and "against its allocator's" in line, line
    assert "internal error" not in proc.stderr and "Traceback" not in proc.stderr
    assert "--force: trying anyway" in proc.stderr


def test_a_run_admitted_at_95_percent_of_its_limit_completes(sizing, tmp_path):
    predicted, total = sizing
    out = tmp_path / "run.json"
    proc = _obscura([*RUN, "--json", str(out)], predicted / 0.95 / total, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    device, = json.loads(out.read_text())["memory"]["devices"]
    assert device["predicted_bytes"] <= device["limit_bytes"], device
    assert device["measured_peak_bytes"] <= device["predicted_bytes"], device      # never under-predicted
