"""A model of one's own through the command line: examples/geglu.py (op names that
are in no built-in family) registered with --model-module, then `obscura train
--schedule obscura` recomputing the family's own preset; without the module, one line
naming the model and --model-module. (examples/custom_model.py takes the same model
through `model-info`, `profile`, `plan` and `train --plan`: test_custom_model.py.)"""
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MODULE = str(ROOT / "examples" / "geglu.py")


def obscura(*args, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "obscura_jax", *args, "--model-module", MODULE],
                          capture_output=True, text=True, timeout=300, cwd=cwd)


@pytest.mark.slow
def test_train_obscura_on_a_registered_model(tmp_path):
    r = obscura("train", "--model", "geglu-tiny", "--schedule", "obscura", "--adjusted", "1",
                "--adjusted-policy", "cmb", "--stages", "4", "--microbatches", "4", "--seq-len", "32",
                "--steps", "2", "--devices", "cpu:4", "--cost-reps", "1", "--no-progress",
                "--json", "run.json", cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    res = json.loads((tmp_path / "run.json").read_text())   # (its losses against the unpipelined
    # model: examples/custom_model.py runs `train --check` on this model)
    assert res["model"] == "geglu-tiny" and res["schedule"] == "obscura" and res["adjusted_stages"] == [0, 1]
    assert len(res["losses"]) == 2 and all(0 < x < 10 for x in res["losses"])
    assert res["stages"][0]["policy"]["recompute"] == sorted(
        ["pre_attn_norm", "pre_ffn_norm", "out_norm", "ffn_gelu", "ffn_glu"])


def test_without_the_module_the_model_is_unknown(tmp_path):
    r = subprocess.run([sys.executable, "-m", "obscura_jax", "model-info", "geglu-tiny"], capture_output=True,
                       text=True, timeout=120, cwd=tmp_path)
    assert r.returncode == 2 and r.stderr.startswith("obscura: error: unknown model 'geglu-tiny'")
    assert "--model-module" in r.stderr and r.stderr.count("\n") == 1
