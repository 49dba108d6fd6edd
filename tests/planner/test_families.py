"""planner.families: every schedule family planned at its best, peaks per device,
the plan's family and V, and `train --plan` running a plan with several chunks per
device."""
import json

import pytest

import models
from planner.analytic import analytic_profile
from planner.families import BY_NAME, FAMILIES, chunk_partition, family_of, offered, search_family, virtual_options
from planner.plan import plan_from_json, plan_search, plan_to_schedule, save_plan
from planner.search import Setting
from tests.planner.synthetic import synthetic_profile


def test_family_names_and_chunk_counts():
    assert [family_of(n) for n in ("obscura", "recomp", "obscura-zb-h1", "obscura-interleaved", "zb-h1")] == \
        ["1f1b", "1f1b", "zb-h1", "interleaved", "zb-h1"]
    prof = synthetic_profile(num_layers=8)
    assert virtual_options(prof, 2) == (2, 4) and virtual_options(prof, 4) == (2,) and virtual_options(prof, 8) == ()
    assert {f.name for f in offered(prof, 8)} == {f.name for f in FAMILIES if f.virtual_stages == 1}
    part = chunk_partition(prof, 2, 2)
    assert len(part) == 4 and part[0][0] == 0 and part[-1][1] == prof.num_units


@pytest.mark.parametrize("name", [f.name for f in FAMILIES])
def test_each_family_fits_its_limit_and_no_limit_is_no_slower(name):
    """Its best fits on every device (weights + held + working set <= limit), its
    no-limit plan recomputes nothing and is at least as fast; a limit below what it
    needs gives no plan, and 'needs' is what its leanest candidate holds."""
    prof = synthetic_profile(num_layers=8)
    fam = BY_NAME[name]
    free = search_family(Setting(prof, 8, 1e18), fam, 2)
    need = max(free.unlimited.peaks)
    res = search_family(Setting(prof, 8, need * 0.8), fam, 2)
    assert not any(free.unlimited.config.recompute)
    if res.best is not None:
        ev = res.best.evaluation
        assert ev.fits and all(pk <= need * 0.8 for pk in ev.peaks) and len(ev.peaks) == 2
        assert res.unlimited.makespan <= ev.makespan * (1 + 1e-9)
    else:
        assert res.needs > need * 0.8
    assert search_family(Setting(prof, 8, 1.0), fam, 2).best is None


@pytest.fixture(scope="module")
def tiny_plan():
    """llama2-tiny's analytic profile, no memory pressure: the fastest family wins."""
    prof = analytic_profile(models.get_config("llama2-tiny"), 16, 2, "A100-80GB")
    return prof, plan_search(prof, 2, 4, "1TiB")


def test_the_pick_is_the_fastest_fitting_and_records_every_family(tiny_plan):
    prof, res = tiny_plan
    plan = res.plan
    fitting = [ev.makespan for ev in res.baselines.values() if ev.fits]
    fitting += [r.best.evaluation.makespan for r in res.families.values() if r.best is not None]
    assert plan.predicted_iteration_time == pytest.approx(min(fitting + [res.searched.makespan]))
    assert all(v is None or plan.predicted_iteration_time <= v for _, v in plan.baselines)
    doc = plan.to_json()
    assert doc["family"] == family_of(plan.schedule) and doc["virtual_stages"] == plan.virtual_stages
    assert [f["name"] for f in doc["families"]] == [f.name for f in FAMILIES]
    for f in doc["families"]:
        if f["evaluated"]:
            assert f["fits"] and f["iteration_time"] >= plan.predicted_iteration_time * (1 - 1e-9)
            assert f["unlimited_time"] <= f["iteration_time"] * (1 + 1e-9)
        else:
            assert f["note"]
    assert plan_from_json(json.loads(json.dumps(doc))) == plan
    assert plan_to_schedule(plan).rows == res.best.schedule.rows
    old = {k: v for k, v in doc.items() if k not in ("family", "virtual_stages", "families")}   # older plans
    assert plan_from_json(old).virtual_stages == 1


def test_train_runs_a_chunked_plan(tiny_plan, tmp_path):
    """An interleaved (V = 2) family plan: its rows and stage -> device map
    round-trip through the file, and `train --plan` runs it on 2 devices with the
    losses of the unpipelined run."""
    from obscura_jax.runtime.placement import place_stages
    from obscura_jax.run.run_config import RunConfig
    from obscura_jax.run.trainer import train
    prof, _ = tiny_plan
    res = plan_search(prof, 2, 4, "1TiB", family_names=("interleaved-v2",))
    plan = res.plan
    assert plan.stage_to_device == (0, 1, 0, 1) and plan.virtual_stages == 2 and plan.device_rows
    path = tmp_path / "plan.json"
    save_plan(plan, path)
    assert plan_to_schedule(plan_from_json(json.loads(path.read_text()))).rows == res.best.schedule.rows
    common = dict(model="llama2-tiny", micro_batch_size=2, seq_len=16, steps=2, measure_costs=False,
                  record_timeline=False, plan_scale_down=True)
    out = train(RunConfig(plan=str(path), **common), lambda p: place_stages(p, "cpu", 2), log=lambda *_: None)
    assert out.pipeline.schedule.num_stages == 4 and len({d.id for d in out.pipeline.placement.devices}) == 2
    ref = train(RunConfig(stages=1, microbatches=4, **{**common, "plan_scale_down": False}),
                lambda p: place_stages(p, "cpu", 1), log=lambda *_: None)
    assert [s.loss for s in out.steps] == pytest.approx([s.loss for s in ref.steps], rel=1e-5)


def test_a_w_that_rederives_its_inputs_is_a_planner_option(tmp_path):
    """--weight-grad rederive prices W from the profile's rederive fields: a
    zero-bubble family then needs less memory; the plan records it and a run of the
    plan uses it unless told otherwise."""
    from obscura_jax.run.run_config import RunConfig
    prof = synthetic_profile(num_layers=8, split=True)
    free = {wg: search_family(Setting(prof, 8, 1e18, weight_grad=wg), BY_NAME["zb-h1"], 4)
            for wg in ("hold", "rederive")}
    assert max(free["rederive"].unlimited.peaks) < max(free["hold"].unlimited.peaks)
    assert free["rederive"].unlimited.makespan >= free["hold"].unlimited.makespan
    res = plan_search(prof, 4, 8, "1TiB", weight_grad="rederive", family_names=("zb-h1",))
    assert res.plan.weight_grad == "rederive" and res.plan.to_json()["weight_grad"] == "rederive"
    save_plan(res.plan, tmp_path / "p.json")
    assert plan_from_json(json.loads((tmp_path / "p.json").read_text())).weight_grad == "rederive"
    assert RunConfig(plan=str(tmp_path / "p.json")).weight_grad_options.mode == "rederive"
    assert RunConfig(plan=str(tmp_path / "p.json"), weight_grad="hold").weight_grad_options.mode == "hold"
    assert "weight_grad" not in plan_search(prof, 4, 8, "1TiB", family_names=("zb-h1",)).plan.to_json()
