"""The command line's environment checks on a GPU machine (obscura_jax/cli/environment.py):
JAX_PLATFORMS=cuda and a valid GPU XLA flag pass the start-up probe, a GPU flag XLA
cannot parse is one line naming it, and a run on the GPU is not held to the host's
memory. Skipped without a GPU (tests/conftest.py)."""
import os
import subprocess
import sys

import pytest

from obscura_jax.cli.environment import probe_jax

pytestmark = pytest.mark.gpu


def _env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env["PYTHONPATH"] = os.getcwd() + os.pathsep + env.get("PYTHONPATH", "")
    return {**env, "XLA_PYTHON_CLIENT_PREALLOCATE": "false", **extra}


def test_the_probe_passes_a_gpu_platform_and_names_a_bad_gpu_flag():
    assert probe_jax(_env(JAX_PLATFORMS="cuda")) is None
    assert probe_jax(_env(XLA_FLAGS="--xla_gpu_enable_latency_hiding_scheduler=true")) is None
    line = probe_jax(_env(XLA_FLAGS="--xla_gpu_enable_latency_hiding_scheduler=maybe"))
    assert line is not None and line.startswith("environment variable XLA_FLAGS: ") and "maybe" in line, line


def test_a_gpu_run_is_not_held_to_the_host_memory(tmp_path):
    """llama2-13b's training state (208 GB with adamw) is more than most hosts hold:
    on the GPU it lives on the devices, so the host-memory bound must not refuse it
    (4 layers here, so it runs quickly; the bound is the per-device check's job)."""
    proc = subprocess.run([sys.executable, "-m", "obscura_jax", "train", "--model", "llama2-13b", "--layers", "4",
                           "--devices", "gpu", "--stages", "1", "--microbatches", "2", "--micro-batch-size", "1",
                           "--seq-len", "128", "--steps", "2", "--no-progress", "--cost-reps", "1"],
                          capture_output=True, text=True, timeout=600, env=_env(JAX_PLATFORMS="cuda"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "host's" not in proc.stderr
