import json
import random

import pytest

from schedules import OpRecord, ScheduleError, StageCosts, Timeline, generate, simulate
from schedules.simulator import stage_memory

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


def test_chunked_timeline_statistics_are_per_device_and_round_trip():
    s = generate("interleaved", 4, 8, virtual_stages=2)
    costs = StageCosts.uniform(8, 0.5, 1, 0, act_bytes=0.5, boundary_bytes=0.25)
    tl = simulate(s, costs)
    assert tl.num_devices == 4 and tl.num_stages == 8 and tl.stage_to_device == s.stage_to_device
    for d, st in enumerate(tl.stages):
        assert st.compute == pytest.approx(8 * 2 * 1.5)                     # both chunks on the device's stream
        assert st.compute + st.idle == pytest.approx(tl.makespan)
        assert st.peak_held_bytes >= st.peak_activation_bytes
    data = json.loads(json.dumps(tl.to_json()))
    assert data["stage_to_device"] == [0, 1, 2, 3, 0, 1, 2, 3] and data["stages"][0]["ops"][4]["action"] == "4F0"
    assert Timeline.from_json(data) == tl
    again = Timeline.from_ops(8, list(tl.ops), name=tl.name, stage_to_device=s.stage_to_device,
                              memory=stage_memory(s, costs))
    assert again == tl


def test_stage_to_device_must_cover_the_devices():
    with pytest.raises(ScheduleError, match="stage_to_device"):
        Timeline.from_ops(2, [], stage_to_device=(0, 2))


def test_measured_backwards_carry_their_recompute_share():
    """A measured timeline cannot see inside a backward: with_recompute_shares marks
    the share the run's costs give (StageCosts.recompute_share), nothing else moves."""
    from schedules.timeline import with_recompute_shares
    s, tl = _sim()
    plain = Timeline.from_ops(4, [OpRecord(o.stage, o.action, o.kind, o.microbatch, o.start, o.end)
                                  for o in tl.ops],
                              [COSTS.kept_bytes(i, s.stages[i].adjusted) for i in range(4)],
                              [spec.swap_fraction for spec in s.stages])
    assert all(st.recompute == 0 for st in plain.stages)
    shares = [COSTS.recompute_share(i, spec.adjusted) for i, spec in enumerate(s.stages)]
    assert shares == [1 / 3, 1 / 3, 0.0, 0.0]           # r / (b + r) on the adjusted stages 0..1
    marked = with_recompute_shares(plain, shares)
    assert [st.recompute for st in marked.stages] == pytest.approx([st.recompute for st in tl.stages])
    assert [(o.start, o.end) for o in marked.ops] == [(o.start, o.end) for o in plain.ops]
    assert marked.makespan == plain.makespan and marked.memory == plain.memory
    with pytest.raises(ScheduleError, match="3 recompute shares for 4 stages"):
        with_recompute_shares(plain, shares[:3])
    assert COSTS.recompute_share(0, True, split=True) == pytest.approx(1 / (1 + 1))   # I = b/2 = 1
