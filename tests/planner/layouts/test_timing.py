"""A layout's iteration time: the pipeline part is the simulator's makespan (the
judge); data-parallel traffic and the optimizer step are a closed form on top,
bounded as planner/layouts/timing.py states."""
import pytest

from planner.layouts import Hardware, TrainingState
from planner.layouts.memory import stage_kinds
from planner.layouts.timing import adam_seconds, dp_times, iteration_time
from schedules import generate, simulate
from tests.planner.layouts.helpers import HW, llama13, pipeline

CASES = [  # mbs, tp, pp, sp, policy, dp, m
    (1, 1, 4, False, "none", 16, 32), (1, 2, 2, True, "cmb", 16, 32), (2, 1, 8, False, "full", 8, 16),
    (1, 1, 1, False, "none", 64, 8), (1, 2, 4, True, "none", 1, 16)]


@pytest.fixture(scope="module")
def cfg13():
    return llama13()


@pytest.mark.parametrize("mbs, tp, pp, sp, policy, dp, m", CASES)
def test_pipeline_time_is_the_simulated_makespan_and_dp_stays_in_bounds(cfg13, mbs, tp, pp, sp, policy, dp, m):
    costs, layout, _ = pipeline(cfg13, 2048, mbs, tp, pp, sp, policy, "cudnn", dp, m)
    stages = stage_kinds(cfg13, pp)
    t, timeline = iteration_time(costs, stages, layout, cfg13, TrainingState(), HW)
    schedule = generate("1f1b", pp, m, adjusted=None if policy == "none" else "all", recompute=(policy,))
    assert t.pipeline == simulate(schedule, costs).makespan == timeline.makespan
    # closed-form DP: at least the pipeline and the optimizer step, at most everything exposed
    per_stage = [(*dp_times(kinds, cfg13, layout, TrainingState(), HW), adam_seconds(kinds, cfg13, layout,
                                                                                   TrainingState(), HW))
                 for kinds in stages]
    assert t.optimizer == max(o for *_, o in per_stage)      # the Adam step, as StageCosts.optimizer
    assert t.total >= t.pipeline + min(o for _, _, o in per_stage) - 1e-12
    assert t.total <= t.pipeline + max(g + a + o for g, a, o in per_stage) + 1e-12
    if dp == 1:
        assert t.dp_exposed == 0.0


def test_slow_networks_expose_data_parallel_traffic(cfg13):
    costs, layout, _ = pipeline(cfg13, 2048, 1, 1, 1, False, "none", "cudnn", 64, 8)
    stages = stage_kinds(cfg13, 1)
    fast, _ = iteration_time(costs, stages, layout, cfg13, TrainingState(), Hardware(internode_bandwidth=4.5e12))
    slow, _ = iteration_time(costs, stages, layout, cfg13, TrainingState(), HW)
    assert fast.dp_exposed == 0.0 and slow.dp_exposed > 0.0      # 26 GB of grads over 45 GB/s do not hide
    assert slow.total - fast.total == pytest.approx(slow.dp_exposed)


def test_boundaries_inside_a_node_are_scaled_to_the_one_p2p_bandwidth(cfg13):
    """StageCosts has one p2p bandwidth (inter-node): a boundary on NVLink carries
    its bytes scaled so its transfer takes the NVLink time."""
    costs, _, _ = pipeline(cfg13, 2048, 1, 1, 4, False, "none", "cudnn", 1, 8)   # 4 GPUs: one node
    act = 2048 * cfg13.hidden * cfg13.compute_bytes
    assert costs.boundary_bytes == pytest.approx((act * HW.internode_bandwidth / HW.nvlink_bandwidth,) * 3 + (0.0,))
    assert costs.p2p_bandwidth == HW.internode_bandwidth
    across, _, _ = pipeline(cfg13, 2048, 1, 1, 4, False, "none", "cudnn", 16, 8)  # stages 16 ranks apart
    assert across.boundary_bytes[:3] == pytest.approx((act,) * 3)
