import json
import random

import pytest

from schedules import OpRecord, ScheduleError, StageCosts, Timeline, generate, simulate

COSTS = StageCosts.uniform(4, 1, 2, 1, act_bytes=8.0, act_bytes_recompute=2.0, host_bandwidth=4.0)


def _sim():
    s = generate("obscura", 4, 8, adjusted=1, swap_blocks=2, swap_fraction=0.5, costs=COSTS)
    return s, simulate(s, COSTS)


def test_from_ops_alone_reproduces_every_statistic():
    s, tl = _sim()
    kept = [COSTS.kept_bytes(i, s.stages[i].adjusted) for i in range(4)]
    beta = [spec.swap_fraction for spec in s.stages]
    shuffled = list(tl.ops)
    random.Random(0).shuffle(shuffled)
    again = Timeline.from_ops(4, shuffled, kept, beta, name=tl.name)
    assert again == tl


def test_measured_clock_offsets_are_removed():
    s, tl = _sim()
    shifted = [OpRecord(o.stage, o.action, o.kind, o.microbatch, o.start + 1e4, o.end + 1e4, o.recompute)
               for o in tl.ops]
    kept = [COSTS.kept_bytes(i, s.stages[i].adjusted) for i in range(4)]
    again = Timeline.from_ops(4, shifted, kept, [x.swap_fraction for x in s.stages])
    assert again.makespan == pytest.approx(tl.makespan)
    assert again.stages == tl.stages


def test_op_bytes_override_stage_figures():
    ops = [OpRecord(0, "F0", "F", 0, 0, 1, bytes=5.0), OpRecord(0, "F1", "F", 1, 1, 2, bytes=7.0),
           OpRecord(0, "B0", "B", 0, 2, 4), OpRecord(0, "B1", "B", 1, 4, 6)]
    tl = Timeline.from_ops(1, ops)
    assert tl.stages[0].peak_activation_bytes == 12.0
    assert dict(tl.memory[0])[4] == 7.0


def test_bubble_classes_add_up_to_the_makespan():
    _, tl = _sim()
    for st in tl.stages:
        assert st.compute + st.idle == pytest.approx(tl.makespan)


def test_json_roundtrip_and_design_shape(tmp_path):
    _, tl = _sim()
    data = json.loads(json.dumps(tl.to_json()))
    assert set(data) >= {"makespan", "stages"}
    for st in data["stages"]:
        assert set(st) >= {"compute", "recompute", "forward_bubble", "backward_bubble", "comm_wait", "swap",
                           "peak_activation_bytes", "peak_inflight_microbatches", "ops"}
        assert set(st["ops"][0]) >= {"action", "start", "end"}
    assert Timeline.from_json(data) == tl


@pytest.mark.parametrize("bad", [[], {"stages": []}, {"makespan": 1, "stages": [{"ops": [{"action": "X1"}]}]},
                                 {"makespan": 1, "stages": [{"ops": [{"action": "F1", "start": "a", "end": 1}]}]}])
def test_from_json_rejects_malformed(bad):
    with pytest.raises(ScheduleError):
        Timeline.from_json(bad)


def test_op_record_checks():
    with pytest.raises(ScheduleError, match="ends"):
        OpRecord(0, "F0", "F", 0, 2.0, 1.0)
    with pytest.raises(ScheduleError, match="recompute"):
        OpRecord(0, "B0", "B", 0, 0.0, 1.0, recompute=2.0)
    with pytest.raises(ScheduleError, match="stage 3"):
        Timeline.from_ops(2, [OpRecord(3, "F0", "F", 0, 0, 1)])
