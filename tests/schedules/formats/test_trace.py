"""Chrome / Perfetto trace-event export of timelines."""
import json

import pytest

from schedules import OpRecord, StageCosts, Timeline, generate, simulate
from schedules.errors import ScheduleError
from schedules.formats.trace import Iteration, Transfer, check_trace_events, trace_events, write_trace


def test_every_op_is_one_complete_event_on_its_device_and_lane(tmp_path):
    costs = StageCosts.uniform(8, 0.5, 1, 0.25, act_bytes=1.0, host_bandwidth=8.0)
    s = generate("obscura-interleaved", 4, 8, adjusted=1, swap_blocks=2, swap_fraction=1.0, costs=costs)
    tl = simulate(s, costs)
    path = tmp_path / "t.json"
    write_trace(tl, path)
    data = json.loads(path.read_text())
    events = data["traceEvents"]
    complete = [e for e in events if e["ph"] == "X"]
    check_trace_events(data)
    ops = [e for e in complete if e["cat"] != "recompute"]
    assert len(ops) == len(tl.ops)
    assert len(complete) - len(ops) == sum(1 for o in tl.ops if o.recompute) > 0
    for e, o in zip(sorted(ops, key=lambda e: (e["ts"], e["pid"], e["name"])),
                    sorted(tl.ops, key=lambda o: (o.start, tl.device_of(o.stage), tl.label(o)))):
        assert e["name"] == tl.label(o) and e["pid"] == s.stage_to_device[o.stage]
        assert e["ts"] == pytest.approx(o.start * 1e6) and e["dur"] == pytest.approx(o.duration * 1e6)
        k = sorted(st for st in range(8) if s.stage_to_device[st] == e["pid"]).index(o.stage)
        assert e["tid"] == 4 * k + {"SO": 1, "SI": 2}.get(o.kind.value, 0) and e["cat"] == o.kind.value
        assert e["args"]["stage"] == o.stage and e["args"]["microbatch"] == o.microbatch
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["name"] == "thread_name"}
    # one track per stage (device 0 runs stages 0 and 4), with its swap tracks where it swaps
    assert names[(0, 0)] == "stage 0" and names[(0, 4)] == "stage 4"
    assert names[(0, 1)] == "stage 0 swap out (SO)" and names[(0, 2)] == "stage 0 swap in (SI)"
    assert sorted(v for v in names.values() if " " not in v[6:]) == [f"stage {i}" for i in range(8)]
    procs = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    assert procs == {0: "device 0 (stages 0, 4)", 1: "device 1 (stages 1, 5)", 2: "device 2 (stages 2, 6)",
                     3: "device 3 (stages 3, 7)"}
    assert data["otherData"]["makespan_s"] == pytest.approx(tl.makespan)


def test_measured_timelines_export_in_seconds():
    ops = [OpRecord(0, "F0", "F", 0, 10.0, 10.002), OpRecord(0, "B0", "B", 0, 10.002, 10.006, recompute=0.001)]
    tl = Timeline.from_ops(1, ops)
    ev = [e for e in trace_events(tl)["traceEvents"] if e["ph"] == "X"]
    assert [e["name"] for e in ev] == ["F0", "B0", "recompute"]   # recompute nested in its backward
    assert ev[2]["ts"] == ev[1]["ts"] and ev[2]["dur"] == pytest.approx(1000) and ev[2]["tid"] == ev[1]["tid"]
    assert ev[1]["ts"] == pytest.approx(2000) and ev[1]["dur"] == pytest.approx(4000)
    assert ev[1]["args"]["recompute_us"] == pytest.approx(1000)
    assert trace_events(tl, seconds_per_unit=1e-3)["traceEvents"][-2]["dur"] == pytest.approx(4)


def test_a_measured_step_spans_its_wall_time_with_transfers_and_the_optimizer_step():
    ops = [OpRecord(0, "F0", "F", 0, 0.001, 0.003), OpRecord(1, "F0", "F", 0, 0.0031, 0.005),
           OpRecord(1, "B0", "B", 0, 0.005, 0.008), OpRecord(0, "B0", "B", 0, 0.008, 0.010)]
    tl = Timeline.from_ops(2, ops, origin=0.0)
    data = trace_events(tl, transfers=[Transfer("0F0->1F0", 0, 1, 0.003, 0.0031)],
                        iteration=Iteration(step=4, seconds=0.012, optimizer_start=0.0105))
    check_trace_events(data)
    ev = {e["name"]: e for e in data["traceEvents"] if e["ph"] == "X"}
    assert ev["0F0->1F0"]["pid"] == 1 and ev["0F0->1F0"]["tid"] == 3 and ev["0F0->1F0"]["cat"] == "transfer"
    assert ev["step 4"]["dur"] == pytest.approx(12000) and ev["optimizer step"]["ts"] == pytest.approx(10500)
    assert data["otherData"]["makespan_s"] == pytest.approx(0.012) == data["otherData"]["iteration_time_s"]
    assert data["otherData"]["actions_makespan_s"] == pytest.approx(0.010)


@pytest.mark.parametrize("bad, why", [
    ([], "traceEvents"),
    ({"traceEvents": [{"ph": "B", "pid": 0, "tid": 0}]}, "ph"),
    ({"traceEvents": [{"ph": "X", "name": "F0", "ts": -1, "dur": 1, "pid": 0, "tid": 0}]}, "ts >= 0"),
    ({"traceEvents": [{"ph": "X", "name": "F0", "ts": 0, "dur": 1, "pid": "0", "tid": 0}]}, "integers"),
    ({"traceEvents": [{"ph": "M", "name": "thread_name", "pid": 0, "tid": 0, "args": {}}]}, "args.name"),
    ({"traceEvents": [{"ph": "X", "name": "F0", "ts": 0, "dur": 1, "pid": 0, "tid": 0}]}, "no thread_name"),
    ({"traceEvents": [{"ph": "M", "name": "thread_name", "pid": 0, "tid": 0, "args": {"name": "s"}},
                      {"ph": "X", "name": "F0", "ts": 0, "dur": 2, "pid": 0, "tid": 0},
                      {"ph": "X", "name": "B0", "ts": 1, "dur": 2, "pid": 0, "tid": 0}]}, "without nesting"),
])
def test_the_validator_refuses_what_perfetto_would_misread(bad, why):
    with pytest.raises(ScheduleError, match=why):
        check_trace_events(bad)
