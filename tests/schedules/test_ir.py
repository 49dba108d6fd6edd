"""The IR: torch's action strings, per-device rows, the stage -> device map."""
import pytest

from schedules import Action, Kind, Schedule, ScheduleError, StageSpec, generate


@pytest.mark.parametrize("text,stage,kind,mb", [("2F0", 2, Kind.F, 0), ("12I34", 12, Kind.I, 34),
                                                ("0W7", 0, Kind.W, 7), ("3SO1", 3, Kind.SO, 1),
                                                ("3SI1", 3, Kind.SI, 1), ("1B2", 1, Kind.B, 2)])
def test_long_form_is_torchs_action_string(text, stage, kind, mb):
    a = Action.parse(text)
    assert (a.stage, a.kind, a.microbatch) == (stage, kind, mb)
    assert a.long == text and str(a) == text[len(str(stage)):]
    assert Action.parse(text, stage) == a


@pytest.mark.parametrize("text,stage,needle", [("F3", None, "cannot parse action 'F3'"),
                                               ("2F3", 1, "names stage 2 but is listed under stage 1"),
                                               ("2X3", None, "cannot parse"), ("2F", None, "cannot parse")])
def test_parse_rejects(text, stage, needle):
    with pytest.raises(ScheduleError, match=needle):
        Action.parse(text, stage)


def _chunked():
    rows = (tuple(Action.parse(a) for a in "0F0 2F0 2B0 0B0".split()),
            tuple(Action.parse(a) for a in "1F0 1B0".split()))
    return Schedule("t", 3, 1, (StageSpec(()), StageSpec(()), StageSpec((), ("full",))), (0, 1, 0), rows)


def test_device_rows_fill_each_stages_own_order():
    s = _chunked()
    assert s.num_devices == 2 and s.stages_on(0) == (0, 2) and not s.one_stage_per_device
    assert s.actions(2) == (Action(2, Kind.F, 0), Action(2, Kind.B, 0))
    assert s.grid() == [["0F0", "2F0", "2B0", "0B0"], ["1F0", "1B0"]]
    assert s.row_labels() == ["device 0", "device 1"] and s.label(Action(2, Kind.F, 0)) == "2F0"
    assert s.adjusted_stages == (2,)


def test_one_stage_per_device_keeps_one_canonical_form():
    s = generate("1f1b", 3, 4)
    same = Schedule(s.name, 3, 4, tuple(StageSpec(()) for _ in range(3)), (0, 1, 2), s.rows)
    assert same == s and same.device_rows == () and s.stage_to_device == (0, 1, 2)
    assert s.rows[1] == s.actions(1) and s.grid()[0][0] == "F0" and s.row_labels()[2] == "stage 2"


@pytest.mark.parametrize("kwargs,needle", [
    ({"stage_to_device": (0, 0, 2)}, "device 1 runs no stage"),
    ({"stage_to_device": (0, 1)}, "must hold 3 device indices"),
    ({"stage_to_device": (0, 1, 10 ** 9)}, "names device 1000000000, but 3 stages run on at most 3 devices"),
    ({"device_rows": ((Action(1, Kind.F, 0),), ())}, "listed on device 0"),
    ({"device_rows": ((Action(5, Kind.F, 0),), ())}, "names stage 5"),
    ({"device_rows": ((),)}, "1 device rows for 2 devices"),
    ({"device_rows": ()}, "several stages on a device: give device_rows"),
])
def test_bad_layouts(kwargs, needle):
    args = {"stage_to_device": (0, 1, 0), "device_rows": ((), ())}
    args.update(kwargs)
    with pytest.raises(ScheduleError, match=needle):
        Schedule("t", 3, 1, tuple(StageSpec(()) for _ in range(3)), **args)


def test_given_stage_actions_must_match_the_rows():
    s = _chunked()
    with pytest.raises(ScheduleError, match="stage 0's actions differ from its order on device 0"):
        Schedule("t", 3, 1, (StageSpec((Action(0, Kind.B, 0), Action(0, Kind.F, 0))), StageSpec(()),
                             StageSpec(())), (0, 1, 0), s.rows)


def test_overlapped_pairs_must_be_adjacent_compute_actions_of_one_row():
    a, b, c = Action(0, Kind.F, 0), Action(0, Kind.B, 0), Action(1, Kind.F, 0)
    rows = ((a, b), (c, Action(1, Kind.B, 0)))
    specs = (StageSpec(()), StageSpec(()))
    assert Schedule("t", 2, 1, specs, (0, 1), rows, ((a, b),)).overlapped == ((a, b),)
    for bad in (((b, a),), ((a, c),), ((a, b), (a, b))):
        with pytest.raises(ScheduleError, match="overlap"):
            Schedule("t", 2, 1, specs, (0, 1), rows, bad)
