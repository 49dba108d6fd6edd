import json
import math
from pathlib import Path

import pytest

from schedules import Action, Kind, ScheduleError, StageCosts, generate, io
from schedules.formats.jsonio import read_json
from schedules.formats.torch_csv import load_torch_csv


@pytest.mark.parametrize("text", ["F3", "B0", "W12", "SO3", "SI7"])
def test_action_prints_and_parses_back(text):
    a = Action.parse(text, 2)
    assert str(a) == text and a.stage == 2


@pytest.mark.parametrize("text", ["X3", "F", "F-1", "SO", "f3", "F3x"])
def test_action_parse_rejects(text):
    with pytest.raises(ScheduleError):
        Action.parse(text, 0)


def test_schedule_json_roundtrip(tmp_path):
    s = generate("obscura", 4, 8, adjusted=1, recompute=("mlp_act", "mlp_mul"), swap_blocks=2, swap_fraction=0.5)
    d = io.schedule_to_json(s)
    assert d["format"] == "obscura-schedule/2" and d["stages"][0]["recompute"] == ["mlp_act", "mlp_mul"]
    assert d["devices"][0][:3] == ["0F0", "0F1", "0F2"] and d["stage_to_device"] == [0, 1, 2, 3]
    assert io.schedule_from_json(json.loads(json.dumps(d))) == s
    path = tmp_path / "s.json"
    io.save_schedule(s, path)
    assert io.load_schedule(path) == s


def _good():
    """The /1 form (one stage per device, short action strings), which stays readable."""
    s = generate("1f1b", 2, 2)
    return {"format": "obscura-schedule/1", "name": s.name, "num_stages": 2, "num_microbatches": 2,
            "stages": [{"recompute": [], "swap_fraction": 0.0, "actions": [str(a) for a in s.actions(i)]}
                       for i in range(2)]}


def test_version_1_files_still_read():
    assert io.schedule_from_json(_good()) == generate("1f1b", 2, 2)


@pytest.mark.parametrize("mutate,needle", [
    (lambda d: d.update(format="obscura-schedule/3"), "format must be"),
    (lambda d: d.pop("num_stages"), "'num_stages' must be an integer"),
    (lambda d: d.update(num_microbatches="2"), "'num_microbatches' must be an integer"),
    (lambda d: d.update(stages={}), "'stages' must be a list"),
    (lambda d: d["stages"].pop(), "1 stage entries for num_stages=2"),
    (lambda d: d["stages"][0].update(actions="F0 B0"), "stage 0: 'actions' must be a list"),
    (lambda d: d["stages"][1]["actions"].append("Q1"), "cannot parse action 'Q1'"),
    (lambda d: d["stages"][0].update(swap_fraction=2.0), "swap fraction must be in [0, 1]"),
    (lambda d: d["stages"][0].update(recompute="full"), "'recompute' must be a list"),
    (lambda d: d["stages"][1]["actions"].pop(), "stage 1 has no B1"),
    (lambda d: d.update(num_microbatches=0), "number of micro-batches must be >= 1"),
])
def test_malformed_schedule_json_is_one_clear_line(mutate, needle):
    d = _good()
    mutate(d)
    with pytest.raises(ScheduleError) as e:
        io.schedule_from_json(d)
    assert needle in str(e.value).splitlines()[0]


def test_load_schedule_reports_bad_files(tmp_path):
    with pytest.raises(ValueError, match="not found"):
        io.load_schedule(tmp_path / "none.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{\"format\": ")
    with pytest.raises(ValueError, match="malformed schedule JSON"):
        io.load_schedule(bad)


def test_save_never_leaves_half_files(tmp_path):
    path = tmp_path / "s.json"
    io.save_schedule(generate("1f1b", 2, 2), path)
    before = path.read_text()
    with pytest.raises(TypeError):
        from schedules.formats.jsonio import write_json_atomic
        write_json_atomic(path, {"x": object()})
    assert path.read_text() == before
    assert [p.name for p in tmp_path.iterdir()] == ["s.json"]


def test_costs_json_roundtrip(tmp_path):
    c = StageCosts(fwd=(1, 2), bwd=(2, 4), recompute=(0.5, 1), act_bytes=(10, 20), host_bandwidth=5e10,
                   p2p_latency=1e-5)
    d = json.loads(json.dumps(c.to_json()))
    realism = {"optimizer", "action_overhead", "link_sharing"}   # written only when set
    assert d["p2p_bandwidth"] is None and set(d) == set(c.__dataclass_fields__) - realism
    assert StageCosts.from_json(d) == c
    cal = c.with_(optimizer=(0.1, 0.2), action_overhead=1e-4, link_sharing=0.5)
    d = json.loads(json.dumps(cal.to_json()))
    assert realism <= set(d) and StageCosts.from_json(d) == cal
    assert StageCosts.from_json({"fwd": [1, 1], "bwd": 2, "recompute": 0.5}).bwd == (2.0, 2.0)
    assert math.isinf(StageCosts.from_json({"fwd": [1], "bwd": [2]}).host_bandwidth)
    # keys it does not know are ignored (docs/formats.md): train --json's costs carry host_bandwidth_out/_in
    assert StageCosts.from_json({"fwd": [1], "bwd": [2], "host_bandwidth_out": 5.0, "speed": "x"}) == \
        StageCosts.from_json({"fwd": [1], "bwd": [2]})


@pytest.mark.parametrize("bad,needle", [
    ([], "top level"), ({"bwd": [1]}, "'fwd' must be"), ({"fwd": [1], "speed": 1}, "'bwd' is required"),
    ({"fwd": [1], "bwd": [1, 2]}, "bwd has 2 entries"), ({"fwd": [1], "bwd": "x"}, "'bwd' must be"),
    ({"fwd": [1]}, "'bwd' is required"), ({"fwd": [-1], "bwd": 1}, ">= 0"),
    ({"fwd": [1], "bwd": 1, "p2p_latency": float("nan")}, "finite"),
    ({"fwd": [1], "format": "x"}, "format"),
])
def test_costs_json_rejects(bad, needle):
    with pytest.raises(ScheduleError, match=needle):
        StageCosts.from_json(bad)


def test_read_json_wraps_errors(tmp_path):
    with pytest.raises(ValueError, match="costs JSON not found"):
        read_json(tmp_path / "x.json", "costs JSON")
    assert Kind("SO") is Kind.SO


def test_overlapped_pairs_round_trip_through_the_schedule_file(tmp_path):
    s = load_torch_csv(Path(__file__).parents[1] / "data" / "torch" / "dualpipev_4rank_10mb.csv")
    io.save_schedule(s, tmp_path / "s.json")
    back = io.load_schedule(tmp_path / "s.json")
    assert back.overlapped == s.overlapped and back.rows == s.rows
    assert "overlapped" not in io.schedule_to_json(generate("zb-v", 4, 8))
    data = io.schedule_to_json(s)
    data["overlapped"] = [["0F7"]]
    with pytest.raises(ScheduleError, match="'overlapped' must be a list of pairs"):
        io.schedule_from_json(data)


def _v1(p, m, actions=("F0", "B0")):
    return {"format": "obscura-schedule/1", "name": "x", "num_stages": p, "num_microbatches": m,
            "stages": [{"actions": list(actions)}] * p}


def _v2(where, devices, m=1):
    return {"format": "obscura-schedule/2", "name": "x", "num_stages": len(where), "num_microbatches": m,
            "stage_to_device": where, "stages": [{}] * len(where), "devices": devices}


@pytest.mark.parametrize("data,needle", [
    (_v1(2, 10 ** 12), "schedule JSON: number of micro-batches must be <= 65536, got 1000000000000"),
    (_v1(3000, 1), "schedule JSON: number of stages must be <= 1024, got 3000"),
    (_v1(300, 300), "schedule JSON: stages x micro-batches must be <= 65536, got 300 x 300"),
    (_v2([0, 10 ** 9], [["0F0", "0B0"], ["1F0", "1B0"]]),
     "schedule JSON: 'stage_to_device': device index 1000000000 is past this tool's bound"),
    (_v2([0, 1], [["0F0", "0B99999999999"], ["1F0", "1B0"]]),
     "schedule JSON: device 0: action 0B99999999999: micro-batch index 99999999999 is past"),
    (_v2([0, 1], [["0F0", "0B0"], ["5000F0", "1B0"]]), "device 1: action 5000F0: stage index 5000 is past"),
    (_v1(1, 1, ["F0", "B" + "9" * 5000]), "schedule JSON: stage 0: action string of 5001 characters"),
    (_v2([0], [["0F0"] * 600_000]), "schedule JSON: 600000 actions; at most 524288 are read"),
])
def test_schedule_files_past_the_bounds_are_one_line_at_once(tmp_path, data, needle):
    """Checked before anything is built: each answers within a second of this
    process's CPU time (CPU, not wall time: a busy machine is not a bug)."""
    import time
    path = tmp_path / "s.json"
    path.write_text(json.dumps(data))
    t0 = time.process_time()
    with pytest.raises(ScheduleError) as e:
        io.load_schedule(path)
    assert time.process_time() - t0 < 1.0
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_load_schedule_refuses_a_fifo_and_deep_json(tmp_path):
    import os
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(ValueError, match="schedule JSON .*/fifo: is a FIFO, not a regular file"):
        io.load_schedule(tmp_path / "fifo")
    (tmp_path / "deep.json").write_text("[" * 200_000 + "]" * 200_000)
    with pytest.raises(ValueError, match="deep.json: JSON nested 200000 deep; at most 500 levels are read"):
        io.load_schedule(tmp_path / "deep.json")
