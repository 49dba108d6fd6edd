"""The paper-figure scripts (scripts/fig12_*.py .. fig16_*.py) and planner.figures:
each main runs on a small setting, writes a PNG and a CSV, and the CSV's numbers
hold together (OOM where the peak exceeds the limit, compute + bubble = total,
no step beyond the no-recompute ceiling, ...). The analytic H200 profile is forced
(--analytic H200) so results do not depend on which measured profiles are committed."""
from __future__ import annotations

import csv
import importlib.util
import json
from pathlib import Path

import pytest

from planner import figures as F

ROOT = Path(__file__).resolve().parents[2]


def _script(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _rows(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _num(v: str) -> float | None:
    return float(v) if v != "" else None


def _close(x: float):
    """Equality up to the CSV's 6 significant digits."""
    return pytest.approx(x, rel=2e-5)


def _run(name: str, out: Path, *args: str) -> list[dict]:
    rc = _script(name).main(["--out", str(out), "--analytic", "H200", "--jobs", "1", *args])
    assert rc == 0
    png, table = out / f"{name}.png", out / f"{name}.csv"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    rows = _rows(table)
    assert rows and all("ANALYTIC H200" in r["profile"] for r in rows)
    return rows


@pytest.mark.slow
def test_fig12_throughput(tmp_path, capsys):
    rows = _run("fig12_throughput", tmp_path, "--families", "llama2", "--sizes", "28b", "--batches", "16",
                "--h200-limit", "none")
    assert [r["system"] for r in rows] == list(F.SYSTEMS)
    by = {r["system"]: r for r in rows}
    assert by["dapple"]["fits"] == "False" and by["dapple"]["iteration_s"] == ""
    assert _num(by["dapple"]["max_stage_peak_gib"]) > 80          # OOM means over the limit
    for r in rows:
        if r["fits"] == "True":
            assert _num(r["max_stage_peak_gib"]) <= 80
            t, sps = _num(r["iteration_s"]), _num(r["samples_per_s"])
            assert sps * t == _close(16) and _num(r["tokens_per_s"]) == _close(sps * 4096)
    ob = by["obscura"]
    # the plan fits and is at least as fast as every baseline that fits
    assert all(_num(ob["samples_per_s"]) >= _num(r["samples_per_s"]) - 1e-9 for r in rows if r["fits"] == "True")
    # 28B must recompute somewhere; the ceiling over DAPPLE+ is ~(f+b+r)/(f+b) = 4/3
    assert 1.0 < _num(ob["speedup_vs_dapple_plus"]) <= _num(ob["ceiling_vs_dapple_plus"]) * (1 + 2e-5) < 1.34
    assert (_num(ob["paper_speedup_low"]), _num(ob["paper_speedup_high"])) == (1.22, 1.27)
    assert ob["obscura_adjusted"] != ""
    out = capsys.readouterr().out
    assert "simulated from Llama-2: ANALYTIC H200" in out and "Obscura/DAPPLE+" in out


def test_fig13_memory(tmp_path):
    rows = _run("fig13_memory", tmp_path, "--families", "gpt3", "--sizes", "28b", "--batches", "16")
    systems = ("dapple", "dapple_plus", "recomp", "ohp_cmb", "strawman", "obscura")
    assert sorted({r["system"] for r in rows}) == sorted(systems) and len(rows) == 6 * 8
    for r in rows:
        parts = _num(r["weights_gib"]) + _num(r["activations_gib"]) + _num(r["working_gib"])
        assert _num(r["peak_gib"]) == _close(parts)
        assert (r["fits"] == "True") == (_num(r["peak_gib"]) <= _num(r["usable_gib"]))
    get = {(r["system"], int(r["stage"])): r for r in rows}
    assert all(get[("obscura", s)]["fits"] == "True" for s in range(8))
    assert get[("dapple", 0)]["fits"] == "False"
    for s in range(8):  # same even partition, same weights; DAPPLE keeps the most activations
        assert get[("dapple", s)]["weights_gib"] == get[("dapple_plus", s)]["weights_gib"]
        assert _num(get[("dapple", s)]["activations_gib"]) >= _num(get[("dapple_plus", s)]["activations_gib"])
    dapple = [_num(get[("dapple", s)]["activations_gib"]) for s in range(7)]
    assert dapple == sorted(dapple, reverse=True)  # 1F1B: stage s holds p - s micro-batches


def test_fig14_stage_time(tmp_path):
    rows = _run("fig14_stage_time", tmp_path, "--families", "llama2", "--sizes", "23b", "--batches", "16")
    assert len(rows) == 3 * 8
    span = {}
    for r in rows:
        assert _num(r["compute_s"]) + _num(r["bubble_s"]) == _close(_num(r["total_s"]))
        assert 0 <= _num(r["recompute_s"]) <= _num(r["compute_s"])
        assert _num(r["total_s"]) <= _num(r["makespan_s"]) + 1e-9
        span[r["system"]] = max(span.get(r["system"], 0.0), _num(r["total_s"]))
        if r["system"] == "dapple_plus":
            assert _num(r["recompute_s"]) > 0
    for r in rows:
        assert span[r["system"]] == _close(_num(r["makespan_s"]))  # some stage ends the iteration
    assert span["obscura"] <= span["strawman"] + 1e-9 < span["dapple_plus"]


@pytest.mark.slow
def test_fig16_ablation(tmp_path):
    rows = _run("fig16_ablation", tmp_path, "--sizes", "28b", "--batches", "16")
    by = {r["step"]: r for r in rows}
    assert set(by) == {"ceiling", "strawman", "relaxation", "swap_recompute", "partition", "cmb"}
    ceiling = _num(by["ceiling"]["speedup_vs_dapple_plus"])
    for r in rows:
        sp, t = _num(r["speedup_vs_dapple_plus"]), _num(r["iteration_s"])
        assert sp == _close(_num(r["dapple_plus_s"]) / t)
        assert 1.0 <= sp <= ceiling + 1e-9
    # Algorithm 1's result is kept only when it simulates faster
    assert _num(by["partition"]["iteration_s"]) <= _num(by["swap_recompute"]["iteration_s"]) + 1e-12
    assert by["relaxation"]["schedule"] == "obscura" and by["relaxation"]["adjusted"] != ""
    assert (by["strawman"]["order"], by["ceiling"]["order"]) == ("strawman", "1f1b")
    assert by["relaxation"]["order"] in ("relaxed", "strawman", "recomp")


def test_missing_profile_falls_back_loudly(tmp_path, capsys):
    src = F.load_source("llama2", tmp_path / "nowhere")
    assert not src.measured and src.profile.device == "analytic:H200"
    assert "ANALYTIC H200" in src.label and "missing" in src.label
    assert "WARNING" in capsys.readouterr().err
    assert F.source_text([src]).startswith("simulated from Llama-2: ANALYTIC")


def test_measured_profile_is_used_and_named(tmp_path):
    from planner.profile import save_profile
    prof = F.load_source("gpt3", tmp_path).profile
    from dataclasses import replace
    save_profile(replace(prof, device="NVIDIA H200"), tmp_path / "profile_gpt3-13b.json")
    src = F.load_source("gpt3", tmp_path)
    assert src.measured and "measured NVIDIA H200 profile" in src.label
    assert str(tmp_path / "profile_gpt3-13b.json") in src.label
    big = src.sized("28b")
    assert (big.model, big.num_layers, big.unit("mlp")) == ("gpt3-28b", 88, prof.unit("mlp"))


@pytest.mark.parametrize("content, needle", [
    ("{not json", "profile"),
    (json.dumps({"format": "obscura-profile/1", "model": "gpt3-13b"}), "missing key"),
])
def test_malformed_profile_is_one_line_error(tmp_path, capsys, content, needle):
    (tmp_path / "profile_llama2-13b.json").write_text(content)
    rc = _script("fig14_stage_time").main(["--out", str(tmp_path / "o"), "--profile-dir", str(tmp_path),
                                           "--families", "llama2"])
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("fig14_stage_time: error:") and needle in err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "o").exists()


def test_wrong_family_profile_is_an_error(tmp_path):
    from planner.profile import save_profile
    save_profile(F.load_source("gpt3", tmp_path).profile, tmp_path / "profile_llama2-13b.json")
    with pytest.raises(ValueError, match="expected llama2-13b"):
        F.load_source("llama2", tmp_path)


@pytest.mark.parametrize("args, needle", [
    (["--batches", "0"], "not a positive integer"),
    (["--sizes", "99b"], "unknown sizes '99b'"),
    (["--families", "bert"], "unknown families 'bert'"),
    (["--memory-limit", "lots"], "not a size"),
])
def test_bad_arguments_exit_2(tmp_path, capsys, args, needle):
    rc = _script("fig13_memory").main(["--out", str(tmp_path), "--analytic", "H200", *args])
    err = capsys.readouterr().err
    assert rc == 2 and needle in err and "Traceback" not in err


def test_write_csv_formats_and_replaces(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("old\n")
    F.write_csv(path, [{"a": 1, "b": None}, {"a": 0.123456789, "c": "x"}])
    assert path.read_text().splitlines() == ["a,b,c", "1,,", "0.123457,,x"]
    assert [p.name for p in tmp_path.iterdir()] == ["t.csv"]  # no temporary left behind
    assert path.stat().st_mode & 0o777 == 0o666 & ~_umask()  # not mkstemp's private 0600


def test_run_tasks_in_processes_keeps_task_order():
    assert F.run_tasks(list, [("ab",), ("c",), ("de",)], jobs=2) == ["a", "b", "c", "d", "e"]


def _umask() -> int:
    import os
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_recompute_caution_flags_near_free_per_op_times(tmp_path, capsys):
    from dataclasses import replace

    from planner.profile import OpProfile, save_profile
    prof = F.load_source("llama2", tmp_path).profile
    assert F.recompute_caution(prof) == ""  # analytic: ops sum to the unit forward
    mlp = prof.unit("mlp")
    cheap = replace(mlp, ops=tuple((n, OpProfile(o.fwd_time * 0.01, o.act_bytes)) for n, o in mlp.ops))
    bad = replace(prof, device="NVIDIA H200", units=tuple((k, cheap if k == "mlp" else u) for k, u in prof.units))
    assert F.recompute_caution(bad).startswith("per-op recompute times sum to mlp 1.0%")
    save_profile(bad, tmp_path / "profile_llama2-13b.json")
    capsys.readouterr()
    src = F.load_source("llama2", tmp_path)
    assert src.measured and "mlp 1.0%" in src.caution and "CAUTION" in F.source_text([src])
    assert "nearly free" in capsys.readouterr().err
