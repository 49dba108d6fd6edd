"""schedules.calibration and the simulator's realism terms: launch overhead per
action, the optimizer step after the flush, p2p links shared with swapping, one
device running every stage; the fit recovers known terms and predicts the committed
one-GPU H200 runs (results/h200/engine_v3) within 5%."""
import json
from pathlib import Path

import pytest

from schedules import StageCosts, generate
from schedules.calibration import (Calibration, RunSample, calibration_from_json, fit, load_calibration,
                                   predict, sample_from_run, save_calibration)
from schedules.errors import ScheduleError
from schedules.simulator import iteration_time, makespan, on_one_device

ROOT = Path(__file__).resolve().parents[2]
P, M = 4, 6


def test_overhead_and_optimizer_terms():
    costs = StageCosts.uniform(P, 1.0, 2.0, 0.0, weight_bytes=10.0)
    sched = generate("1f1b", P, M)
    ideal = makespan(sched, costs)
    assert iteration_time(sched, costs) == ideal
    cal = Calibration(action_overhead=0.1, optimizer_s_per_byte=0.05)
    c = cal.apply(costs)
    assert c.optimizer == (0.5,) * P and iteration_time(sched, c) == pytest.approx(makespan(sched, c) + 0.5)
    # the critical path of 1F1B holds 2M + 2(P-1) compute actions; each takes 0.1 longer
    assert makespan(sched, c) == pytest.approx(ideal + 0.1 * (2 * M + 2 * (P - 1)))


def test_on_one_device_runs_every_stage_in_turn():
    costs = StageCosts.uniform(P, 1.0, 2.0, 1.0)
    for name, adjusted in (("1f1b", None), ("recomp", "all"), ("obscura", 1)):
        sched = generate(name, P, M, adjusted=adjusted)
        one = on_one_device(sched, costs)
        assert one.num_devices == 1 and [st.actions for st in one.stages] == [st.actions for st in sched.stages]
        work = sum(M * (costs.fwd[s] + costs.backward_time(s, spec.adjusted)) for s, spec in enumerate(sched.stages))
        assert makespan(one, costs) == pytest.approx(work)


def test_a_swapping_neighbour_shares_the_p2p_link():
    costs = StageCosts.uniform(P, 1.0, 2.0, 1.0, act_bytes=4.0, boundary_bytes=1.0, p2p_bandwidth=1.0,
                               host_bandwidth=4.0)
    sched = generate("obscura", P, M, adjusted=1, swap_blocks=1, swap_fraction=0.5)
    shared = costs.with_(link_sharing=0.5)
    assert costs.p2p_time(0, True) == 1.0 and shared.p2p_time(0, True) == 2.0 and shared.p2p_time(0) == 1.0
    assert makespan(sched, shared) > makespan(sched, costs)
    with pytest.raises(ScheduleError, match="link_sharing"):
        costs.with_(link_sharing=0.95)


def _sample(name, adjusted, measured_cal):
    costs = StageCosts.uniform(P, 0.01, 0.02, 0.01, weight_bytes=1e9)
    sched = generate(name, P, M, adjusted=adjusted)
    s = RunSample(name, sched, costs, 0.0, 1e9 * P * measured_cal.optimizer_s_per_byte, True)
    return RunSample(name, sched, costs, predict(s, measured_cal), s.optimizer, True)


def test_fit_recovers_known_terms_and_round_trips(tmp_path):
    truth = Calibration(action_overhead=2e-4, optimizer_s_per_byte=3e-12)
    samples = [_sample("1f1b", None, truth), _sample("recomp", "all", truth)]
    cal = fit(samples, source="synthetic")
    assert cal.action_overhead == pytest.approx(2e-4) and cal.optimizer_s_per_byte == pytest.approx(3e-12)
    assert cal.assumed == ("link_sharing",)
    assert all(r["measured_over_calibrated"] == pytest.approx(1.0) for r in cal.fit)
    save_calibration(cal, tmp_path / "cal.json")
    assert load_calibration(tmp_path / "cal.json") == cal
    with pytest.raises(ScheduleError, match="obscura-calibration/1"):
        calibration_from_json({"format": "x"})
    with pytest.raises(ScheduleError, match="action_overhead"):
        Calibration(action_overhead=-1.0)


def test_committed_h200_runs_are_predicted_within_5_percent():
    runs = sorted((ROOT / "results/h200/engine_v3").glob("gpu_*.json"))
    samples = [sample_from_run(p.stem, json.loads(p.read_text())) for p in runs]
    assert {"gpu_1f1b", "gpu_obscura_swap_device_put", "gpu_recomp_all", "gpu_recomp_all_layer"} <= {s.label for s in samples}
    cal = fit(samples)
    for r in cal.fit:
        assert 0.95 <= r["measured_over_calibrated"] <= 1.05, r
    committed = load_calibration(ROOT / "results/h200/calibration.json")
    assert committed.optimizer_s_per_byte == pytest.approx(cal.optimizer_s_per_byte)


@pytest.mark.parametrize("change, needle", [
    ({"action_overhead": 1e300}, "action_overhead must be in [0, 1 s], got 1e+300"),
    ({"action_overhead": 2.0}, "action_overhead must be in [0, 1 s]"),
    ({"optimizer_s_per_byte": 1e-3}, "optimizer_s_per_byte must be in [0, 1e-6 s/B (1 MB/s)]"),
    ({"link_sharing": 0.95}, "link_sharing must be in [0, 0.9]"),
    ({"action_overhead": float("inf")}, "must be a finite number >= 0"),
    ({"action_overhead": -1e-6}, "must be a finite number >= 0"),
    ({"fit": "runs"}, "'fit' must be a list of run objects"),
    ({"source": 3}, "'source' must be a string"),
])
def test_a_calibration_file_holds_physical_values(change, needle, tmp_path):
    """A calibration file is in seconds: each term within what makes physical sense
    (docs/formats.md), else one line naming it."""
    doc = {**Calibration(action_overhead=1e-4, optimizer_s_per_byte=1e-12).to_json(), **change}
    path = tmp_path / "cal.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(ScheduleError) as e:
        load_calibration(path)
    assert needle in str(e.value) and "\n" not in str(e.value)
