"""planner.families: the schedule family the planner picks (1f1b, interleaved V,
zb-h1, plain or with Obscura's settings), peaks per device, the plan's family and V,
and `train --plan` running a plan with several chunks per device."""
import json

import pytest

import models
from planner.analytic import analytic_profile
from planner.families import chunk_partition, family_of, simulate_family, virtual_options
from planner.plan import _to_plan, plan_from_json, plan_search, plan_to_schedule, save_plan
from planner.profile import FULL
from planner.search import Config, Setting
from tests.planner.synthetic import synthetic_profile


def test_family_names_and_chunk_counts():
    assert [family_of(n) for n in ("obscura", "recomp", "obscura-zb-h1", "obscura-interleaved", "zb-h1")] == \
        ["1f1b", "1f1b", "zb-h1", "interleaved", "zb-h1"]
    prof = synthetic_profile(num_layers=8)
    assert virtual_options(prof, 2) == (2, 4) and virtual_options(prof, 4) == (2,) and virtual_options(prof, 8) == ()
    part = chunk_partition(prof, 2, 2)
    assert len(part) == 4 and part[0][0] == 0 and part[-1][1] == prof.num_units


def test_chunked_peaks_are_per_device():
    """interleaved V = 2 on 2 devices: two peaks, each a device's two chunks' weights
    plus what the simulation held there; full recompute needs less than none."""
    prof = synthetic_profile(num_layers=8)
    setting = Setting(prof, 4, 1e18)
    part = chunk_partition(prof, 2, 2)
    plain = simulate_family(setting, Config("interleaved", part, (), (frozenset(),) * 4, (0,) * 4,
                                            virtual_stages=2))
    full = simulate_family(setting, Config("interleaved", part, (0, 1, 2, 3), (frozenset({FULL}),) * 4,
                                           (0,) * 4, virtual_stages=2))
    assert plain.schedule.stage_to_device == (0, 1, 0, 1) and len(plain.peaks) == 2
    for d in range(2):
        weights = plain.costs.weight_bytes[d] + plain.costs.weight_bytes[d + 2]
        assert plain.peaks[d] == pytest.approx(weights + plain.activation_bytes[d])
        assert full.peaks[d] < plain.peaks[d]
    assert full.makespan > plain.makespan


@pytest.fixture(scope="module")
def tiny_plan():
    """llama2-tiny's analytic profile, no memory pressure: the fastest family wins."""
    prof = analytic_profile(models.get_config("llama2-tiny"), 16, 2, "A100-80GB")
    return prof, plan_search(prof, 2, 4, "1TiB")


def test_the_pick_is_the_fastest_fitting_and_records_its_family(tiny_plan):
    prof, res = tiny_plan
    plan = res.plan
    fitting = [ev.makespan for ev in [*res.baselines.values(), *res.families.values()] if ev.fits]
    assert plan.predicted_iteration_time == pytest.approx(min(fitting + [res.searched.makespan]))
    assert all(v is None or plan.predicted_iteration_time <= v for _, v in plan.baselines)
    assert {"interleaved_full", "zb_h1_full"} <= set(dict(plan.baselines))
    doc = plan.to_json()
    assert doc["family"] == family_of(plan.schedule) and doc["virtual_stages"] == plan.virtual_stages
    assert plan_from_json(json.loads(json.dumps(doc))) == plan
    assert plan_to_schedule(plan).rows == res.best.schedule.rows
    old = {k: v for k, v in doc.items() if k not in ("family", "virtual_stages")}   # plans before families
    assert plan_from_json(old).virtual_stages == 1


def test_train_runs_a_chunked_plan(tiny_plan, tmp_path):
    """An interleaved (V = 2) plan: its rows and stage -> device map round-trip
    through the file, and `train --plan` runs it on 2 devices like --stages 1."""
    from obscura_jax.runtime.placement import place_stages
    from obscura_jax.run.run_config import RunConfig
    from obscura_jax.run.trainer import train
    prof, res = tiny_plan
    setting = Setting(prof, 4, 2**40)
    ev = simulate_family(setting, Config("interleaved", chunk_partition(prof, 2, 2), (), (frozenset(),) * 4,
                                         (0,) * 4, virtual_stages=2))
    plan = _to_plan(ev, 4, 2**40, res.baselines, prof.op_names)
    assert plan.stage_to_device == (0, 1, 0, 1) and plan.virtual_stages == 2 and plan.device_rows
    path = tmp_path / "plan.json"
    save_plan(plan, path)
    assert plan_to_schedule(plan_from_json(json.loads(path.read_text()))).rows == ev.schedule.rows
    common = dict(model="llama2-tiny", micro_batch_size=2, seq_len=16, steps=2, measure_costs=False,
                  record_timeline=False, plan_scale_down=True)
    out = train(RunConfig(plan=str(path), **common), lambda p: place_stages(p, "cpu", 2), log=lambda *_: None)
    assert out.pipeline.schedule.num_stages == 4 and len({d.id for d in out.pipeline.placement.devices}) == 2
    ref = train(RunConfig(stages=1, microbatches=4, **{**common, "plan_scale_down": False}),
                lambda p: place_stages(p, "cpu", 1), log=lambda *_: None)
    assert [s.loss for s in out.steps] == pytest.approx([s.loss for s in ref.steps], rel=1e-5)
