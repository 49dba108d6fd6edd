"""Chrome / Perfetto trace-event export of timelines."""
import json

import pytest

from schedules import OpRecord, StageCosts, Timeline, generate, simulate
from schedules.trace import trace_events, write_trace


def test_every_op_is_one_complete_event_on_its_device_and_lane(tmp_path):
    costs = StageCosts.uniform(8, 0.5, 1, 0.25, act_bytes=1.0, host_bandwidth=8.0)
    s = generate("obscura-interleaved", 4, 8, adjusted=1, swap_blocks=2, swap_fraction=1.0, costs=costs)
    tl = simulate(s, costs)
    path = tmp_path / "t.json"
    write_trace(tl, path)
    data = json.loads(path.read_text())
    events = data["traceEvents"]
    complete = [e for e in events if e["ph"] == "X"]
    assert len(complete) == len(tl.ops)
    for e, o in zip(sorted(complete, key=lambda e: (e["ts"], e["pid"], e["name"])),
                    sorted(tl.ops, key=lambda o: (o.start, tl.device_of(o.stage), tl.label(o)))):
        assert e["name"] == tl.label(o) and e["pid"] == s.stage_to_device[o.stage]
        assert e["ts"] == pytest.approx(o.start * 1e6) and e["dur"] == pytest.approx(o.duration * 1e6)
        assert e["tid"] == {"SO": 1, "SI": 2}.get(o.kind.value, 0) and e["cat"] == o.kind.value
        assert e["args"]["stage"] == o.stage and e["args"]["microbatch"] == o.microbatch
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert names[(0, 0)] == "compute" and names[(0, 1)] == "host out (SO)" and names[(0, 2)] == "host in (SI)"
    procs = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    assert procs == {0: "device 0 (stages 0, 4)", 1: "device 1 (stages 1, 5)", 2: "device 2 (stages 2, 6)",
                     3: "device 3 (stages 3, 7)"}
    assert data["otherData"]["makespan_s"] == pytest.approx(tl.makespan)


def test_measured_timelines_export_in_seconds():
    ops = [OpRecord(0, "F0", "F", 0, 10.0, 10.002), OpRecord(0, "B0", "B", 0, 10.002, 10.006, recompute=0.001)]
    tl = Timeline.from_ops(1, ops)
    ev = [e for e in trace_events(tl)["traceEvents"] if e["ph"] == "X"]
    assert [e["name"] for e in ev] == ["F0", "B0"]
    assert ev[1]["ts"] == pytest.approx(2000) and ev[1]["dur"] == pytest.approx(4000)
    assert ev[1]["args"]["recompute_us"] == pytest.approx(1000)
    assert trace_events(tl, seconds_per_unit=1e-3)["traceEvents"][-1]["dur"] == pytest.approx(4)
