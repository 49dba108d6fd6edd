"""scripts/device/h200_profile_session.py in its CPU smoke mode (tiny models): the GPU
session's outputs, written without OR-Tools (the GPU machine has none)."""
import json
import sys

import pytest

import h200_profile_session
from planner.profile import load_profile


@pytest.mark.slow
def test_cpu_smoke_writes_profiles_yardstick_and_session(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "ortools", None)          # importing it would fail, as on the GPU
    monkeypatch.setattr(h200_profile_session.shutil, "which", lambda name: None)   # no nvidia-smi here
    assert h200_profile_session.main(["--cpu-smoke", "--out", str(tmp_path)]) == 0
    prof = load_profile(tmp_path / "profile_llama2-tiny.json")
    assert prof.model == "llama2-tiny" and prof.device == "cpu" and prof.seq_len == 64
    assert prof.layer_recompute_time is not None and prof.layer_recompute_time >= 0
    yard = json.loads((tmp_path / "layer_yardstick.json").read_text())
    saved, layer = yard["variants"]["saved"], yard["variants"]["layer"]
    assert yard["layers"] == 2 and min(saved["bwd_s"], layer["bwd_s"], saved["fwd_s"]) > 0
    # one checkpoint per layer keeps the two layer inputs only; saving every op keeps more
    assert layer["hidden_residual_bytes"] == 2 * 2 * 64 * 64 * 4
    assert saved["hidden_residual_bytes"] > layer["hidden_residual_bytes"]
    session = json.loads((tmp_path / "session.json").read_text())
    assert session["smoke"] and session["layer_recompute"]["yardstick_per_layer_s"] == yard["recompute_per_layer_s"]
    assert not (tmp_path / "nvidia_smi.csv").exists()
    assert "yardstick llama2-tiny x2 layers" in capsys.readouterr().out
