"""Measured layer costs: file validation, the derivation rule, calibration of the
analytic model, and the CPU run of the GPU bench script feeding a sweep."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

import models
from planner.layouts import (Hardware, LayoutGrid, MeasuredLayers, analytic_units, layer_key,
                             load_measured, run_sweep)
from planner.layouts.measured import BENCH_REVISION, FORMAT, calibrate
from planner.layouts.unit_costs import recompute_ops

ROOT = Path(__file__).resolve().parents[3]
HW = Hardware()


@pytest.fixture(scope="module")
def shape13():
    return models.get_config("llama2-13b")


def entry(cfg, seq, mbs, policy, fwd, bwd, residual, attention="cudnn", status="measured", temp=None):
    return {"model": cfg.name, "layer": layer_key(cfg), "seq_len": seq, "micro_batch": mbs,
            "attention": attention, "policy": policy, "status": status, "fwd_time": fwd,
            "bwd_time": bwd, "residual_bytes": residual, "temp_bytes": temp}


def layer(cfg, seq, mbs, attention, policy, tp=1, sp=False):
    """(fwd, bwd, recompute, kept bytes) of one attention + MLP layer, and the unit models."""
    units = analytic_units(cfg, seq, mbs, attention, policy, tp, sp, HW)
    a, m = units["attn"].profile(), units["mlp"].profile()
    r = recompute_ops(policy, cfg.family)
    return (a.fwd_time + m.fwd_time, a.bwd_time + m.bwd_time, a.recompute_time(r) + m.recompute_time(r),
            a.kept_bytes(r) + m.kept_bytes(r)), units


def analytic_entry(cfg, seq, mbs, policy, scale=1.0, attention="cudnn"):
    (fwd, bwd, rec, kept), _ = layer(cfg, seq, mbs, attention, policy)
    return entry(cfg, seq, mbs, policy, scale * fwd, scale * (bwd + rec), kept, attention)


def test_derivation_rule(shape13):
    layers = MeasuredLayers({"format": FORMAT, "bench_revision": BENCH_REVISION, "device": "test", "entries": [
        entry(shape13, 2048, 1, "none", 2.0, 4.0, 100.0),
        entry(shape13, 2048, 1, "full", 2.0, 6.0, 10.0),
        entry(shape13, 2048, 1, "cmb", 2.0, 4.5, 60.0),
        entry(shape13, 2048, 4, "none", 7.0, 15.0, 400.0),
        entry(shape13, 2048, 4, "full", 7.0, 23.0, 40.0),
        entry(shape13, 2048, 4, "mlp", 7.0, 1.0, 1.0, status="oom"),
    ]})
    key = layer_key(shape13)
    m = layers.lookup(key, 2048, 1, "cudnn", "cmb")
    assert (m.source, m.fwd, m.bwd, m.bwd_none, m.residual_bytes) == ("measured", 2.0, 4.5, 4.0, 60.0)
    d = layers.lookup(key, 2048, 4, "cudnn", "cmb")
    # recompute overhead scales like full's: 0.5 * (23 - 15) / (6 - 4) = 2
    assert d.source == "derived" and d.fwd == 7.0 and d.bwd == pytest.approx(17.0)
    assert d.residual_bytes == pytest.approx(240.0)      # 60 * 400 / 100
    assert layers.lookup(key, 2048, 4, "cudnn", "mlp") is None     # no mbs-1 anchor for mlp
    assert layers.status(key, 2048, 4, "cudnn", "mlp") == "oom"
    assert layers.lookup(key, 2048, 2, "cudnn", "none") is None
    assert layers.lookup(key, 8192, 1, "cudnn", "none") is None
    assert layers.lookup(key, 2048, 1, "xla", "none") is None


def test_derivation_across_attention_kernels(shape13):
    """xla measured only at micro-batch 1 (none, full): its micro-batch 4 points scale
    like cuDNN's (rule B) and its other policies borrow cuDNN's overhead (rule A)."""
    layers = MeasuredLayers({"format": FORMAT, "bench_revision": BENCH_REVISION, "entries": [
        entry(shape13, 2048, 1, "none", 2.0, 4.0, 100.0),
        entry(shape13, 2048, 1, "full", 2.0, 6.0, 10.0),
        entry(shape13, 2048, 1, "cmb", 2.0, 4.5, 60.0),
        entry(shape13, 2048, 4, "none", 7.0, 15.0, 400.0),
        entry(shape13, 2048, 4, "full", 7.0, 23.0, 40.0),
        entry(shape13, 2048, 1, "none", 3.0, 7.0, 100.0, attention="xla"),
        entry(shape13, 2048, 1, "full", 3.0, 11.0, 10.0, attention="xla"),
    ]})
    key = layer_key(shape13)
    n4 = layers.lookup(key, 2048, 4, "xla", "none")
    assert n4.source == "derived"
    assert (n4.fwd, n4.bwd, n4.residual_bytes) == pytest.approx((3.0 * 7 / 2, 7.0 * 15 / 4, 400.0))
    f4 = layers.lookup(key, 2048, 4, "xla", "full")
    assert f4.bwd == pytest.approx(11.0 * 23 / 6) and f4.bwd_none == pytest.approx(n4.bwd)
    c1 = layers.lookup(key, 2048, 1, "xla", "cmb")
    # cuDNN's cmb costs a quarter of its full overhead; xla's full overhead is 4
    assert c1.source == "derived" and c1.bwd == pytest.approx(7.0 + 0.25 * 4.0)
    assert c1.residual_bytes == pytest.approx(60.0)
    c4 = layers.lookup(key, 2048, 4, "xla", "cmb")
    assert c4.bwd == pytest.approx(n4.bwd + 0.25 * (f4.bwd - n4.bwd))


@pytest.mark.parametrize("mutate, text", [
    (lambda d: d.update(format="obscura-profile/1"), "format must be"),
    (lambda d: d.update(entries={}), "'entries' must be a list"),
    (lambda d: d["entries"][0]["layer"].pop("hidden"), "'layer' needs"),
    (lambda d: d["entries"][0].update(status="great"), "status must be one of"),
    (lambda d: d["entries"][0].update(fwd_time=-1.0), "fwd_time must be a number >= 0"),
    (lambda d: d["entries"][0].update(bwd_time="fast"), "bwd_time must be a number >= 0"),
    (lambda d: d["entries"][0].update(seq_len=0), "seq_len must be a positive integer"),
])
def test_malformed_files_are_rejected(shape13, tmp_path, mutate, text):
    data = {"format": FORMAT, "bench_revision": BENCH_REVISION, "entries": [entry(shape13, 2048, 1, "none", 1.0, 2.0, 3.0)]}
    mutate(data)
    path = tmp_path / "layers.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=text) as err:
        load_measured(path)
    assert "\n" not in str(err.value) and str(path) in str(err.value)


def test_unreadable_file(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="malformed measured layer file"):
        load_measured(bad)
    with pytest.raises(ValueError, match="not found"):
        load_measured(tmp_path / "missing.json")


def test_calibration_is_identity_on_analytic_numbers_and_scales_otherwise(shape13):
    for policy in ("none", "cmb", "full"):
        r = recompute_ops(policy, shape13.family)
        _, tp1 = layer(shape13, 2048, 2, "cudnn", policy)
        _, tp2 = layer(shape13, 2048, 2, "cudnn", policy, 2, True)
        layers = MeasuredLayers({"format": FORMAT, "bench_revision": BENCH_REVISION, "entries": [
            analytic_entry(shape13, 2048, 2, "none"), analytic_entry(shape13, 2048, 2, policy)]})
        m = layers.lookup(layer_key(shape13), 2048, 2, "cudnn", policy)
        same, factors = calibrate(tp2, tp1, m, r)
        assert all(v == pytest.approx(1.0) for k, v in factors.items() if k != "recompute" or
                   policy != "none")
        for k in ("attn", "mlp"):
            got, want = same[k].profile(), tp2[k].profile()
            assert got.fwd_time == pytest.approx(want.fwd_time)
            assert got.bwd_time + got.recompute_time(r) == pytest.approx(want.bwd_time + want.recompute_time(r))
            assert got.kept_bytes(r) == pytest.approx(want.kept_bytes(r))
        slow = MeasuredLayers({"format": FORMAT, "bench_revision": BENCH_REVISION, "entries": [
            analytic_entry(shape13, 2048, 2, "none", 2.0), analytic_entry(shape13, 2048, 2, policy, 2.0)]})
        doubled, _ = calibrate(tp2, tp1, slow.lookup(layer_key(shape13), 2048, 2, "cudnn", policy), r)
        for k in ("attn", "mlp"):
            # compute doubles, TP collectives (modelled, not measured) do not
            assert doubled[k].profile().fwd_time == pytest.approx(
                2 * tp2[k].profile().fwd_time - tp2[k].comm.fwd)
            assert doubled[k].comm == tp2[k].comm


def test_sweep_uses_measured_costs_and_labels_rows(shape13):
    grid = LayoutGrid(gpus=64, global_batch=256, micro_batches=(1,), pps=(1, 2), tps=(1,),
                      policies=("none", "full"), attentions=("xla", "cudnn"))
    entries = [analytic_entry(shape13, 2048, 1, p, 1.5) for p in ("none", "full")]
    layers = MeasuredLayers({"format": FORMAT, "bench_revision": BENCH_REVISION, "device": "fake GPU", "entries": entries}, "fake.json")
    r = run_sweep(shape13, 2048, grid, measured=layers)
    a = run_sweep(shape13, 2048, grid, measured=None)
    by = {(x.layout.pp, x.layout.policy, x.layout.attention): x for x in r.results}
    base = {(x.layout.pp, x.layout.policy, x.layout.attention): x for x in a.results}
    for (pp, policy, att), x in by.items():
        # xla has no measured point: its analytic costs are scaled by the file's
        # mean measured/analytic ratio (1.5 here) so rows stay comparable
        assert x.source == ("measured" if att == "cudnn" else "scaled")
        if x.fits:
            assert x.time.pipeline > 1.3 * base[pp, policy, att].time.pipeline
    assert any("scaled by 1.50" in n for n in r.notes)
    assert r.to_json()["measured_layer_costs"] == "fake.json"
    other = MeasuredLayers({"format": FORMAT, "bench_revision": BENCH_REVISION, "entries": []}, "empty.json")
    assert "no entry for this layer shape" in run_sweep(shape13, 2048, grid, measured=other).notes[0]


@pytest.mark.slow
def test_cpu_bench_script_feeds_the_sweep(tmp_path):
    """scripts/layouts/sweep_layer_bench.py --tiny on CPU: every task gets an entry (cudnn is
    recorded as skipped here), and the sweep of the tiny model uses the measurements."""
    out = tmp_path / "tiny_layers.json"
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "layouts" / "sweep_layer_bench.py"), "--tiny",
                           "--seq-lens", "32", "--policies", "none,full,cmb", "--out", str(out),
                           "--budget-s", "1e9"],   # every task, however slow the machine (the time budget is not under test)
                          capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    layers = load_measured(out)
    data = json.loads(out.read_text())
    statuses = {(e["attention"], e["micro_batch"], e["policy"]): e["status"] for e in data["entries"]}
    assert statuses[("cudnn", 1, "none")] == "skipped"
    assert all(statuses[("xla", b, p)] == "measured" for b, p in [(1, "none"), (1, "full"), (1, "cmb"),
                                                                 (2, "none"), (2, "full")])
    assert data["matmul_tflops"] > 0 and data["device"]
    cfg = models.get_config("llama2-tiny")
    for e in data["entries"]:
        if e["status"] == "measured":
            # bwd_time is fwd+bwd minus fwd, two timings: on a busy machine their difference can be 0
            assert e["fwd_time"] > 0 and e["fwd_bwd_time"] > 0 and e["bwd_time"] >= 0
            (_, _, _, kept), _ = layer(cfg, 32, e["micro_batch"], "xla", e["policy"])
            assert e["residual_bytes"] == kept
    grid = LayoutGrid(gpus=4, global_batch=8, micro_batches=(1, 2), pps=(1, 2), tps=(1,),
                      policies=("none", "cmb", "selective"), attentions=("xla", "cudnn"))
    r = run_sweep(cfg, 32, grid, measured=layers)
    src = {(x.layout.micro_batch, x.layout.policy, x.layout.attention): x.source for x in r.results}
    assert src[1, "none", "xla"] == "measured" and src[1, "cmb", "xla"] == "measured"
    # derivable only when full recompute measured slower than none at mbs 1 (CPU timings
    # of a tiny layer are noisy; the rule itself is tested on exact numbers above)
    t = {(e["micro_batch"], e["policy"]): e.get("bwd_time") for e in data["entries"]
         if e["attention"] == "xla"}
    assert src[2, "cmb", "xla"] == ("derived" if t[1, "full"] > t[1, "none"] else "scaled")
    assert src[1, "selective", "xla"] == "scaled" and src[1, "none", "cudnn"] == "scaled"


def test_bench_priority_order():
    from obscura_jax.profiling.layer_bench import plan_tasks
    tasks = plan_tasks(("llama2-13b", "llama-30b"), (2048, 8192), (1, 2, 4), ("xla", "cudnn"),
                       ("none", "selective", "mlp", "cmb", "full"))
    assert len(tasks) == 2 * 2 * (2 * 5 + 2 * 2 * 2)    # pruned: no non-anchor policy at mbs > 1
    assert len(set(tasks)) == len(tasks)
    kinds = [(t.attention, t.micro_batch > 1, t.policy in ("none", "full")) for t in tasks]
    order = list(dict.fromkeys(kinds))
    assert order == [("cudnn", False, True), ("cudnn", False, False), ("xla", False, True),
                     ("cudnn", True, True), ("xla", False, False), ("xla", True, True)]
    full = plan_tasks(("llama2-13b",), (2048,), (1, 2), ("cudnn",), ("none", "cmb", "full"),
                      full_grid=True)
    assert {(t.micro_batch, t.policy) for t in full} == {(b, p) for b in (1, 2)
                                                         for p in ("none", "cmb", "full")}


def test_files_from_the_old_bench_are_ignored(shape13):
    """Revision-1 files timed fwd+bwd without returning the output: XLA dropped forward
    work and recompute looked free. The sweep must not rank on them."""
    entries = [analytic_entry(shape13, 2048, 1, p, 1.5) for p in ("none", "full")]
    old = MeasuredLayers({"format": FORMAT, "entries": entries}, "old.json")
    assert old.stale
    grid = LayoutGrid(gpus=64, global_batch=256, micro_batches=(1,), pps=(1, 2), tps=(1,),
                      policies=("none", "full"), attentions=("cudnn",))
    r = run_sweep(shape13, 2048, grid, measured=old)
    assert all(x.source == "analytic" for x in r.results)
    assert "ignored old.json" in r.notes[0] and r.measured_path is None
    new = MeasuredLayers({"format": FORMAT, "bench_revision": BENCH_REVISION, "entries": entries})
    assert not new.stale
