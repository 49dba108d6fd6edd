"""Per-op recompute calibration from measured stage overheads (planner/calibrate.py)."""
import pytest

import models
from planner.analytic import analytic_profile
from planner.calibrate import calibrate_profile, layer_ratios, stage_overheads
from planner.profile import FULL


def _stage_mfu(none, cmb, mlp, full, layers=5):
    rows = [{"attention": "cudnn", "policy": p, "layers": layers, "fwd_bwd_s": t}
            for p, t in (("none", none), ("cmb", cmb), ("mlp", mlp), ("full", full))]
    return {"rows": rows}


@pytest.fixture(scope="module")
def analytic():
    return analytic_profile(models.get_config("llama2-tiny"), 64, 1, "H200")


def test_overheads_are_per_layer_differences():
    ov = stage_overheads(_stage_mfu(0.070, 0.071, 0.080, 0.085))
    assert ov["cmb"] == pytest.approx(0.0002) and ov["mlp"] == pytest.approx(0.002)
    assert ov["full"] == pytest.approx(0.003)
    with pytest.raises(ValueError, match="lacks policies"):
        stage_overheads({"rows": _stage_mfu(1, 1, 1, 1)["rows"][:2]})


def test_calibrated_presets_reproduce_the_measured_overheads(analytic):
    # pretend the analytic profile is the measurement: calibrate it against overheads
    f = analytic.unit("attn").fwd_time + analytic.unit("mlp").fwd_time
    ov = {"cmb": 0.02 * f, "mlp": 0.3 * f, "full": 0.5 * f}
    cal = calibrate_profile(analytic, analytic, overheads=ov, source="test")
    attn, mlp = cal.unit("attn"), cal.unit("mlp")
    cmb = {"attn_norm", "mlp_norm", "mlp_act", "mlp_mul"}
    got_cmb = attn.recompute_time(cmb & set(attn.op_names)) + mlp.recompute_time(cmb & set(mlp.op_names))
    assert got_cmb == pytest.approx(ov["cmb"])
    assert mlp.recompute_time({FULL}) == pytest.approx(ov["mlp"])
    assert attn.recompute_time({FULL}) + mlp.recompute_time({FULL}) == pytest.approx(ov["full"])
    # ops nobody saves are never recomputed; bytes and unit times are untouched
    assert mlp.op("mlp_down").fwd_time == 0.0 and attn.op("attn_res").fwd_time == 0.0
    assert [o.act_bytes for _, o in mlp.ops] == [o.act_bytes for _, o in analytic.unit("mlp").ops]
    assert mlp.fwd_time == analytic.unit("mlp").fwd_time
    assert "calibrated: test" in cal.device
    # "full" is priced by the calibrated total, not the whole forward
    assert mlp.full_recompute_time == pytest.approx(ov["mlp"])
    assert mlp.full_recompute_time < mlp.fwd_time


def test_ratio_calibration_scales_each_unit(analytic):
    cal = calibrate_profile(analytic, analytic, ratios={"attn": 0.4, "mlp": 0.6, "head": 0.5})
    r = layer_ratios(cal)
    assert r["attn"] == pytest.approx(0.4) and r["mlp"] == pytest.approx(0.6)
    assert r["head"] == pytest.approx(0.5)
    with pytest.raises(ValueError):
        calibrate_profile(analytic, analytic)
