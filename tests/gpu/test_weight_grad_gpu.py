"""A split backward's W on one CUDA GPU (docs/cli.md, W's held block between I and W):
a Llama-2-13B layer (cuDNN attention, bf16, seq 4096, micro-batch 1) holds the
matmuls' inputs and output cotangents only (644 MiB; 496 MiB re-derived) with I + W
equal to the fused backward, and a zero-bubble run with a re-deriving W and the
head at once trains like the plain model. Skipped without a GPU (tests/conftest.py)."""
import json
import subprocess
import sys

import pytest

from schedules.generators import CHUNKED
from tests.gpu.test_gpu_tier import TINY, _env, _obscura

pytestmark = pytest.mark.gpu


def test_a_13b_layer_holds_the_least_w_block_on_the_gpu():
    code = r"""
import jax, numpy as np, models
from obscura_jax.run.data import BatchShape
from obscura_jax.runtime.pipeline import build_program
from obscura_jax.runtime.weight_grad import WeightGrad
from obscura_jax.observe.measure import unit_weight_grad_bytes
cfg = models.get_config("llama2-13b", num_layers=1)
gpu = [d for d in jax.devices() if d.platform == "gpu"][0]
shape, mib = BatchShape(1, 1, 4096), 2 ** 20
want = {"hold": {(1, 2): 240, (2, 3): 404}, "rederive": {(1, 2): 200, (2, 3): 296}}
for mode in ("hold", "rederive"):
    for rng in ((1, 2), (2, 3)):
        prog = build_program(cfg, rng, "none", gpu, shape, True, WeightGrad(mode))
        assert unit_weight_grad_bytes(prog) == want[mode][rng] * mib, (mode, rng, unit_weight_grad_bytes(prog))
        params = jax.device_put(models.init_params(cfg, 0, unit_range=rng), gpu)
        key = jax.random.key(0)
        x = jax.device_put(jax.random.normal(key, (1, 4096, cfg.hidden)).astype(cfg.compute_dtype), gpu)
        out, res = prog.forward(params, x)
        dy = jax.device_put(jax.random.normal(key, out.shape).astype(out.dtype), gpu)
        g, dx, _ = prog.backward(params, res, dy, prog.zero_grads())
        gi, dxi, held, _ = prog.input_grad(params, res, dy, prog.zero_grads())
        gw, _ = prog.weight_grad(params, held, dy, gi)
        for a, b in zip(jax.tree.leaves(gw), jax.tree.leaves(g)):
            a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
            np.testing.assert_allclose(a, b, rtol=2e-2, atol=2e-2 * np.abs(b).max())
        a, b = np.asarray(dxi, np.float32), np.asarray(dx, np.float32)
        np.testing.assert_allclose(a, b, rtol=2e-2, atol=2e-2 * np.abs(b).max())
        print(mode, rng, held.nbytes // mib, "MiB held, residuals", prog.residual_bytes // mib, "MiB")
print("w block ok")
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, env=_env())
    assert proc.returncode == 0 and "w block ok" in proc.stdout, proc.stdout[-2000:] + proc.stderr[-3000:]


@pytest.mark.parametrize("schedule", ["zb-h1", "zb-v", "interleaved-zb"])
def test_a_rederiving_w_trains_like_the_plain_model_on_the_gpu(tmp_path, schedule):
    out = tmp_path / "run.json"
    extra = ["--virtual-stages", "2"] if schedule in CHUNKED else []
    _obscura(["train", *TINY, "--schedule", schedule, *extra, "--weight-grad", "rederive",
              "--head-weight-grad", "at-once", "--check", "--json", str(out)])
    res = json.loads(out.read_text())
    assert res["check"]["equal"], res["check"]
    assert res["weight_grad"] == {"mode": "rederive", "head": "at-once"}
    assert res["costs"]["weight_grad_held"] == [st["weight_grad_held_bytes_per_microbatch"] for st in res["stages"]]
