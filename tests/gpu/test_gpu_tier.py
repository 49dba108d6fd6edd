"""The GPU tier (`make test-gpu`, pytest -m gpu): on one CUDA GPU, every schedule
family against the unpipelined reference, host swapping, the split backward's I and
W against the fused backward, the profiler's fields, and the engine's measured time
against the simulator's. Skipped without a GPU (tests/conftest.py).

Runs go through the CLI in subprocesses (the path a user takes; a fresh process has
no CPU-emulation flags from the test session), each bounded by a timeout."""
import json
import os
import subprocess
import sys

import pytest

from schedules.generators import CHUNKED, SCHEDULES

pytestmark = pytest.mark.gpu

TINY = ["--model", "llama2-tiny", "--devices", "gpu", "--stages", "4", "--microbatches", "8",
        "--micro-batch-size", "2", "--seq-len", "64", "--steps", "2", "--no-progress"]


def _env(share_gpu: bool = True) -> dict:
    """A fresh process's environment: no CPU-emulation flags from the test session;
    `share_gpu`: allocate GPU memory as needed (tests may run side by side, -n N)."""
    env = dict(os.environ)
    env.pop("XLA_FLAGS", None)
    if share_gpu:
        env["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"
    env["PYTHONPATH"] = os.getcwd() + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _obscura(args: list[str], timeout: float = 300) -> str:
    proc = subprocess.run([sys.executable, "-m", "obscura_jax", *args], capture_output=True, text=True,
                          timeout=timeout, env=_env())
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout


@pytest.mark.parametrize("schedule", sorted(SCHEDULES))
def test_every_schedule_family_equals_the_reference_on_the_gpu(tmp_path, schedule):
    out = tmp_path / "run.json"
    extra = ["--virtual-stages", "2"] if schedule in CHUNKED else []
    _obscura(["train", *TINY, "--schedule", schedule, *extra, "--check", "--json", str(out)])
    res = json.loads(out.read_text())
    assert res["check"]["equal"], res["check"]
    assert all("gpu" in str(st["device"]).lower() or "cuda" in str(st["device"]).lower()
               for st in res["stages"]), [st["device"] for st in res["stages"]]


def test_host_swap_equals_the_reference_on_the_gpu(tmp_path):
    out = tmp_path / "run.json"
    _obscura(["train", *TINY, "--schedule", "obscura", "--adjusted", "1", "--swap-blocks", "2",
              "--swap-fraction", "0.5", "--check", "--json", str(out)])
    res = json.loads(out.read_text())
    assert res["check"]["equal"], res["check"]
    assert any(st["swap_fraction"] > 0 for st in res["stages"])


def test_split_backward_halves_equal_the_fused_backward_on_the_gpu():
    code = r"""
import jax, numpy as np, models
jax.config.update("jax_default_matmul_precision", "highest")   # as --check: no TF32 rounding
from obscura_jax.run.data import BatchShape
from obscura_jax.runtime.pipeline import build_program
cfg = models.get_config("llama2-tiny")
gpu = [d for d in jax.devices() if d.platform == "gpu"][0]
for rng in ((0, 3), (1, 5), (5, 10)):
    prog = build_program(cfg, rng, "none", gpu, BatchShape(2, 2, 64), True)
    params = jax.device_put(models.init_params(cfg, 0, unit_range=rng), gpu)
    spec = models.build_stage(cfg, rng).input_spec(2, 64)
    key = jax.random.key(0)
    x = (jax.random.randint(key, spec.shape, 0, cfg.vocab_size) if rng[0] == 0
         else jax.random.normal(key, spec.shape).astype(spec.dtype))
    x = jax.device_put(x, gpu)
    t = jax.device_put(jax.random.randint(key, (2, 64), 0, cfg.vocab_size), gpu)
    out, res = prog.forward(params, x, t) if prog.returns_loss else prog.forward(params, x)
    dy = prog.loss_weight(8) if prog.returns_loss else jax.device_put(jax.random.normal(key, out.shape), gpu)
    g, dx, _ = prog.backward(params, res, dy, prog.zero_grads())
    gi, dxi, held, _ = prog.input_grad(params, res, dy, prog.zero_grads())
    gw, _ = prog.weight_grad(params, held, dy, gi)
    for a, b in zip(jax.tree.leaves(gw), jax.tree.leaves(g)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)
    if dx is not None:
        np.testing.assert_allclose(np.asarray(dxi), np.asarray(dx), rtol=1e-5, atol=1e-6)
    assert held.nbytes == prog.weight_grad_held_bytes > 0
print("split ok")
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=_env())
    assert proc.returncode == 0 and "split ok" in proc.stdout, proc.stdout[-2000:] + proc.stderr[-3000:]


def test_profiler_fields_are_sane_on_the_gpu(tmp_path):
    out = tmp_path / "profile.json"
    _obscura(["profile", "--model", "llama2-tiny", "--seq-len", "64", "--micro-batch", "2",
              "--reps", "3", "--json", str(out)])     # the median of 3 drops one slowed sample
    prof = json.loads(out.read_text())
    assert "H200" in prof["device"] or "gpu" in prof["device"].lower() or "NVIDIA" in prof["device"]
    for kind, unit in prof["units"].items():
        assert unit["fwd_time"] > 0 and unit["bwd_time"] > 0 and unit["weight_bytes"] > 0, kind
        assert unit["input_grad_time"] >= 0 and unit["weight_grad_time"] > 0, kind
        # the embedding's gradient is a scatter-add of dy that I finishes: its W holds nothing
        assert (unit["weight_grad_bytes"] > 0) == (kind != "embed"), kind
        # tiny programs are launch-bound: sane, not tight (the H200 profile of the
        # 13B models is held to 0.55 / 1.08 in BENCHMARKS)
        assert unit["weight_grad_time"] < 3 * unit["bwd_time"], kind
    assert prof["host_bandwidth"] > 1e9


def test_engine_measured_over_simulated_on_the_gpu(tmp_path):
    """scripts/bench/bench_engine.py's GPU mode on 4 layers of llama2-7b shapes (one GPU,
    4 stages sharing it): measured / one-GPU serial simulation <= 1.05."""
    proc = subprocess.run([sys.executable, "scripts/bench/bench_engine.py", "--gpu", "--layers", "4", "--steps", "4",
                           "--runs", "1f1b,zb_h1", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=420, env=_env(share_gpu=False))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    bench = json.loads((tmp_path / "bench_gpu.json").read_text())
    runs = {name: r for name, r in bench["runs"].items()} if "runs" in bench else bench
    for name in ("1f1b", "zb_h1"):
        ratio = runs[name]["measured_over_serial_simulation"]
        assert ratio is not None and ratio <= 1.05, (name, ratio)
