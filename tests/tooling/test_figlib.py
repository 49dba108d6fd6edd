"""scripts/figures/figlib.py: what the figure scripts print, write and parse."""
from __future__ import annotations

import os
from dataclasses import replace

import figlib as L
from planner.profile import save_profile


def test_load_sources_prints_each_warning(tmp_path, capsys):
    sources = L.load_sources(["llama2"], tmp_path / "nowhere", None)
    assert "WARNING: llama2: figures use an ANALYTIC H200" in capsys.readouterr().err
    save_profile(replace(sources[0].profile, device="NVIDIA H200"), tmp_path / "profile_llama2-13b.json")
    L.load_sources(["llama2"], tmp_path, None)
    assert capsys.readouterr().err == ""        # a measured profile without cautions: silent


def test_write_csv_formats_and_replaces(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("old\n")
    L.write_csv(path, [{"a": 1, "b": None}, {"a": 0.123456789, "c": "x"}])
    assert path.read_text().splitlines() == ["a,b,c", "1,,", "0.123457,,x"]
    assert [p.name for p in tmp_path.iterdir()] == ["t.csv"]  # no temporary left behind
    assert path.stat().st_mode & 0o777 == 0o666 & ~_umask()  # not mkstemp's private 0600


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_figure_scripts_write_outside_results_unless_asked(capsys):
    """Each figure script's --out defaults to figures_out/ (never over the committed
    results/figures); the committed figures regenerate only with --out results/figures."""
    import importlib.util
    from pathlib import Path

    import pytest

    assert not L.FIGURES_OUT.startswith("results")
    scripts = Path(L.__file__).parent
    for name in ("fig05_bubbles", "fig12_throughput", "fig13_memory", "fig14_stage_time", "fig16_ablation",
                 "draw_schedules"):
        spec = importlib.util.spec_from_file_location(name, scripts / f"{name}.py")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        with pytest.raises(SystemExit):
            mod.main(["--help"])
        text = " ".join(capsys.readouterr().out.split())
        assert f"(default {L.FIGURES_OUT}" in text and "(default results/figures" not in text, name
