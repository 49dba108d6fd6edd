"""experiments.figures: the profile a figure is simulated from (measured, else a loud
analytic stand-in), the per-case rows, and Fig. 5's rows. The scripts that draw
them are tested in tests/tooling/test_paper_figures.py."""
from __future__ import annotations

from dataclasses import replace

import pytest

from experiments import figures as F
from planner.profile import OpProfile, save_profile


def test_missing_profile_falls_back_loudly(tmp_path):
    src = F.load_source("llama2", tmp_path / "nowhere")
    assert not src.measured and src.profile.device == "analytic:H200"
    assert "ANALYTIC H200" in src.label and "missing" in src.label
    assert "WARNING" in src.warning
    assert F.source_text([src]).startswith("simulated from Llama-2: ANALYTIC")


def test_measured_profile_is_used_and_named(tmp_path):
    prof = F.load_source("gpt3", tmp_path).profile
    save_profile(replace(prof, device="NVIDIA H200"), tmp_path / "profile_gpt3-13b.json")
    src = F.load_source("gpt3", tmp_path)
    assert src.measured and "measured NVIDIA H200 profile" in src.label and not src.warning
    assert str(tmp_path / "profile_gpt3-13b.json") in src.label
    big = src.sized("28b")
    assert (big.model, big.num_layers, big.unit("mlp")) == ("gpt3-28b", 88, prof.unit("mlp"))


def test_wrong_family_profile_is_an_error(tmp_path):
    save_profile(F.load_source("gpt3", tmp_path).profile, tmp_path / "profile_llama2-13b.json")
    with pytest.raises(ValueError, match="expected llama2-13b"):
        F.load_source("llama2", tmp_path)


def test_unknown_names_are_user_errors(tmp_path):
    from planner.errors import PlanError
    with pytest.raises(PlanError, match="unknown model family"):
        F.load_source("bert", tmp_path)
    with pytest.raises(PlanError, match="unknown model size"):
        F.load_source("gpt3", tmp_path).sized("99b")


def test_run_tasks_in_processes_keeps_task_order():
    assert F.run_tasks(list, [("ab",), ("c",), ("de",)], jobs=2) == ["a", "b", "c", "d", "e"]


def test_recompute_caution_flags_near_free_per_op_times(tmp_path):
    prof = F.load_source("llama2", tmp_path).profile
    assert F.recompute_caution(prof) == ""  # analytic: ops sum to the unit forward
    mlp = prof.unit("mlp")
    cheap = replace(mlp, ops=tuple((n, OpProfile(o.fwd_time * 0.01, o.act_bytes)) for n, o in mlp.ops))
    bad = replace(prof, device="NVIDIA H200", units=tuple((k, cheap if k == "mlp" else u) for k, u in prof.units))
    assert F.recompute_caution(bad).startswith("per-op recompute times sum to mlp 1.0%")
    save_profile(bad, tmp_path / "profile_llama2-13b.json")
    src = F.load_source("llama2", tmp_path)
    assert src.measured and "mlp 1.0%" in src.caution and "CAUTION" in F.source_text([src])
    assert "nearly free" in src.warning


def test_fig05_rows_match_the_acceptance_makespans():
    rows, _ = F.fig05_rows()
    got = {r.config: r.makespan for r in rows}
    assert got["Recomp-None"] == 33 and got["Recomp-0"] == 38 and got["Recomp-All"] == 44
    assert got["Strawman-0"] == 34 and got["Strawman-0"] <= got["Recomp-0"] <= got["Recomp-1"] <= got["Recomp-All"]
    assert [r.overhead_pct for r in rows][:4] == pytest.approx([0, 100 * 5 / 33, 100 * 7 / 33, 100 * 11 / 33])
    assert [r.paper_pct for r in rows][:6] == [0.0, 19.0, 25.0, 33.0, 8.0, 17.0]
