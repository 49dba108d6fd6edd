"""Offloading on a GPU (`make test-gpu`; skipped without one): `train --offload
--check` equals the unpipelined model and reports pinned_host residuals (no CPU
note), and the device really holds fewer bytes: after a stage's forward,
memory_stats' bytes in use grow by the device part its accounting reports, not by
the offloaded part. Runs in subprocesses (no CPU-emulation flags), bounded."""
import json
import subprocess
import sys

import pytest

from tests.gpu.test_gpu_tier import TINY, _env, _obscura

pytestmark = pytest.mark.gpu


def test_train_offload_equals_the_reference_on_the_gpu(tmp_path):
    out = tmp_path / "run.json"
    _obscura(["train", *TINY, "--offload", "mlp_gate,mlp_up", "--check", "--json", str(out)])
    res = json.loads(out.read_text())
    assert res["check"]["equal"], res["check"]
    assert res["offload"]["memory_kinds"] == ["pinned_host"] and res["offload"]["note"] is None
    assert all(st["residual_memory_kinds"].get("pinned_host", 0) > 0 for st in res["stages"])


DEVICE_BYTES = r"""
import json, jax, models
from obscura_jax.run.data import BatchShape
from obscura_jax.runtime.pipeline import build_program
cfg = models.get_config("llama2-tiny")
gpu = [d for d in jax.devices() if d.platform == "gpu"][0]
shape, units = BatchShape(1, 8, 256), (1, 5)
params = jax.device_put(models.init_params(cfg, 0, unit_range=units), gpu)
x = jax.device_put(jax.random.normal(jax.random.key(0), (8, 256, cfg.hidden)), gpu)
for spec in ("none", models.resolve_policy("none", "llama", offload="mlp_gate,mlp_up,mlp_act,mlp_mul")):
    prog = build_program(cfg, units, spec, gpu, shape)
    y, res = prog.forward(params, x)                   # compiled and warm: its temporaries are freed
    jax.block_until_ready((y, res.leaves))
    del y, res
    before = gpu.memory_stats()["bytes_in_use"]
    y, res = prog.forward(params, x)
    jax.block_until_ready((y, res.leaves))
    grown = gpu.memory_stats()["bytes_in_use"] - before
    kinds = sorted({leaf.sharding.memory_kind for leaf in res.leaves})
    # the stage's own input is a residual too, but it was there before the forward
    head = x.nbytes if prog.layout.keeps_input else 0
    print(json.dumps({"device": prog.residual_bytes, "host": prog.residual_host_bytes, "out": prog.output_bytes,
                      "head": head, "grown": grown, "kinds": kinds}))
    del y, res
"""


def test_offloaded_residuals_leave_the_device_memory_on_the_gpu():
    proc = subprocess.run([sys.executable, "-c", DEVICE_BYTES], capture_output=True, text=True,
                          timeout=300, env=_env(share_gpu=False))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    plain, off = (json.loads(line) for line in proc.stdout.strip().splitlines()[-2:])
    assert plain["host"] == 0 and off["host"] > 0 and off["kinds"] == ["device", "pinned_host"]
    assert off["device"] + off["host"] == plain["device"]
    # the allocator rounds each buffer up: within 5% (and 1 MiB) of what the accounting says
    for run in (plain, off):
        expected = run["device"] - run["head"] + run["out"]
        assert abs(run["grown"] - expected) <= max(0.05 * expected, 2 ** 20), run
