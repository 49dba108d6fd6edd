"""The multi-GPU report (experiments.multi_gpu_report) on real H200 train JSONs
(results/h200/engine_v2): the gap terms add up, the term off is the one that was made
off, and the swap figures are bench_engine's."""
import json
import math
from pathlib import Path

import pytest

from experiments import multi_gpu_report as rep

V2 = Path(__file__).resolve().parents[2] / "results/h200/engine_v2"


@pytest.fixture(scope="module")
def runs():
    return {name: json.loads((V2 / f"gpu_{name}.json").read_text())
            for name in ("1f1b", "obscura_swap_device_put", "obscura_noswap")}


def test_gap_terms_sum_to_the_gap(runs):
    res = runs["obscura_swap_device_put"]
    g = rep.gap_terms(res, predicted=1.2)
    assert sum(g["terms"].values()) == pytest.approx(res["iteration_time"] - 1.2, abs=1e-12)
    assert g["terms"]["costs"] == pytest.approx(res["simulated_makespan"] - 1.2)


def test_speedup_names_the_term_that_is_off(runs):
    o, d = runs["obscura_swap_device_put"], runs["1f1b"]    # stand-ins for Obscura and DAPPLE+
    exact = {"predicted_iteration_time": o["simulated_makespan"], "baselines": {"dapple_plus": d["simulated_makespan"]}}
    s = rep.speedup(o, d, exact)
    assert s["predicted"] == pytest.approx(s["simulated_same_run"]) and s["contributions"]["costs"] == 0
    assert sum(s["contributions"].values()) == pytest.approx(math.log(1 + s["gap"]), abs=1e-12)
    # All stages shared one GPU, which the simulator does not model: waits and bubbles differ.
    assert s["term_off"] == "waits"
    off = dict(exact, predicted_iteration_time=o["simulated_makespan"] * 0.8)   # the plan's costs 20% short
    s = rep.speedup(o, d, off)
    assert s["gap"] < -rep.GAP and s["term_off"] == "costs"


def test_swap_under_load_matches_bench_engine(runs):
    one_gpu = json.loads((V2 / "bench_gpu.json").read_text())
    w = rep.swap_under_load(runs["obscura_swap_device_put"], runs["obscura_noswap"], one_gpu)
    recorded = one_gpu["runs"]["obscura_swap_device_put"]
    assert w["hidden"]["fraction_hidden"] == pytest.approx(recorded["hidden"]["fraction_hidden"])
    assert w["one_gpu"]["fraction_hidden"] == recorded["hidden"]["fraction_hidden"]
    assert w["swapping_stages"] == [0, 1]


def test_report_writes_the_tables(tmp_path, runs):
    (tmp_path / "runs").mkdir()
    (tmp_path / "plans").mkdir()
    names = {"m8_proc_obscura": "obscura_swap_device_put", "m8_proc_dapple_plus": "1f1b",
             "m8_proc_noswap": "obscura_noswap"}
    for label, name in names.items():
        (tmp_path / "runs" / f"{label}.json").write_text(json.dumps(runs[name]))
    plan = {"predicted_iteration_time": 1.0, "baselines": {"dapple_plus": 1.3}}
    (tmp_path / "plans" / "plans.json").write_text(json.dumps({"plans": {"8": plan}}))
    summary = rep.report(tmp_path, V2)
    assert set(summary["speedups"]) == {"m8_proc"} and "m8_proc_obscura" in summary["swap"]
    table = (tmp_path / "table.md").read_text()
    assert "| 8 | one process per GPU | obscura |" in table and "gantt/m8_proc_obscura.png" in table
    assert "1.300x" in table and "41.0 / 41.8" in table
    assert json.loads((tmp_path / "bench_multi_gpu.json").read_text())["runs"].keys() == set(names)
