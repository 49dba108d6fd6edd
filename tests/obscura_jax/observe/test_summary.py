"""The run summary (obscura_jax.observe.summary): the in-run swap overlap. (The summary of
a real run: test_trainer.py.)"""
import pytest

from obscura_jax.observe.summary import swap_overlap
from schedules.ir import Action, Kind
from schedules.timeline import OpRecord, Timeline


class Dev:
    def __init__(self, i):
        self.id = i


def testswap_overlap_is_the_share_of_copy_time_under_compute():
    f, so, si = Action(0, Kind.F, 0), Action(0, Kind.SO, 0), Action(0, Kind.SI, 0)
    ops = [OpRecord.of(f, 0.0, 2.0), OpRecord.of(so, 1.0, 3.0), OpRecord.of(si, 5.0, 6.0)]
    tl = Timeline.from_ops(1, ops)
    # SO: 1 of its 2 seconds under F; SI: none of its second
    assert swap_overlap(tl, [Dev(0)]) == pytest.approx(1.0 / 3.0)
    assert swap_overlap(Timeline.from_ops(1, ops[:1]), [Dev(0)]) is None


def test_swap_overlap_counts_every_compute_lane_kind_as_compute():
    """A split backward's I and W are compute like F and B: a swap under them hides."""
    i0, w0, so, si = (Action(0, Kind.I, 0), Action(0, Kind.W, 0), Action(0, Kind.SO, 1), Action(0, Kind.SI, 1))
    ops = [OpRecord.of(i0, 0.0, 2.0), OpRecord.of(w0, 2.0, 4.0), OpRecord.of(so, 1.0, 3.0),
           OpRecord.of(si, 3.5, 5.0)]
    # SO: all of its 2 seconds under I then W; SI: 0.5 of its 1.5 under W
    assert swap_overlap(Timeline.from_ops(1, ops), [Dev(0)]) == pytest.approx(2.5 / 3.5)


def test_chunked_schedule_rows_are_model_stages_and_idle_figures_belong_to_the_device():
    """interleaved on 2 devices: 4 model stages, stage s on device s % 2. A stage row
    takes its own compute; bubbles and the simulated peak of the device are in
    pipeline_devices (the summary once indexed per-device statistics by stage)."""
    from obscura_jax.observe.summary import pipeline_devices, stage_measured
    from schedules import StageCosts, generate, simulate

    sched = generate("interleaved", 2, 4, virtual_stages=2)
    assert sched.num_stages == 4 and sched.num_devices == 2
    costs = StageCosts.uniform(4, fwd=1.0, bwd=2.0, act_bytes=10.0)
    sim = simulate(sched, costs)
    rows = [stage_measured(sim, s, alone=False) for s in range(4)]
    assert [r["compute"] for r in rows] == pytest.approx([4 * 3.0] * 4)   # 4 micro-batches x (F + B)
    assert all(r["backward_bubble"] is None for r in rows)

    class Measured:
        pass
    m = Measured()
    m.costs = costs
    devs = pipeline_devices(sched, m, sim, sim)
    assert [d["stages"] for d in devs] == [[0, 2], [1, 3]]
    assert [d["measured"]["compute"] for d in devs] == pytest.approx([24.0, 24.0])
    assert devs[0]["simulated_peak_bytes"] == pytest.approx(
        sum(costs.weight_bytes[s] for s in (0, 2)) + sim.stages[0].peak_activation_bytes)
    # one stage per device: the stage row is the device's statistics
    plain = simulate(generate("1f1b", 2, 4), StageCosts.uniform(2, fwd=1.0, bwd=2.0))
    assert stage_measured(plain, 1, alone=True)["backward_bubble"] == plain.stages[1].backward_bubble


def test_the_serial_estimate_is_for_devices_the_schedule_does_not_share():
    from obscura_jax.observe.summary import placed_as_written
    assert placed_as_written((0, 1, 2, 3, 0, 1, 2, 3), [5, 6, 7, 8, 5, 6, 7, 8])   # interleaved on 4 devices
    assert placed_as_written((0, 1), [3, 4])
    assert not placed_as_written((0, 1, 2, 3), [0, 0, 0, 0])                      # 1f1b on one GPU
    assert not placed_as_written((0, 1, 0, 1), [0, 0, 0, 0])                      # interleaved on one device
    assert not placed_as_written((0, 1, 2, 3), [0, 1, 0, 1])                      # round-robin on 2


def test_a_resumed_curve_starts_with_the_metrics_logs_steps_marked():
    from types import SimpleNamespace

    from obscura_jax.observe.summary import loss_curve
    from obscura_jax.run.trainer import StepLog
    out = SimpleNamespace(start_step=2, steps=[StepLog(3, 0.5, 0.1, True)],
                          before_resume=[{"step": 1, "loss": 0.9, "seconds": 0.2}, {"step": 2, "loss": 0.7, "seconds": 0.3}])
    assert loss_curve(out) == {"steps": [1, 2, 3], "losses": [0.9, 0.7, 0.5], "step_seconds": [0.2, 0.3, 0.1],
                               "before_resume": [True, True, False]}
    fresh = SimpleNamespace(start_step=0, steps=[StepLog(1, 0.9, 0.2, False)], before_resume=[])
    assert loss_curve(fresh)["before_resume"] == [False]


def test_devices_are_named_by_process_and_local_id_with_several_processes():
    import jax

    from obscura_jax.observe.summary import device_name
    cpus = jax.devices("cpu")
    assert device_name(cpus[1], 1) == str(cpus[1]) == "cpu:1"
    assert device_name(cpus[1], 2) == "p0:cpu:1"       # this process's second device

    class Gpu:       # a GPU keeps its number on its host
        platform, process_index, local_hardware_id, id = "gpu", 1, 3, 7

        def __str__(self):
            return "cuda:7"
    assert device_name(Gpu(), 2) == "p1:cuda:3"
