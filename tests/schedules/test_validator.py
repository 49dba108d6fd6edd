import pytest
from hypothesis import assume, given, settings, strategies as st

from schedules import Action, Kind, Schedule, ScheduleError, StageSpec, generate, validate
from schedules.deps import dependency_table
from schedules.formats.text import format_grid
from schedules.validator import Problem, _deadlock, _stage_problems
from tests.budget import examples
from tests.schedules.helpers import corrupt, replace_row


def _rows(*rows, m=2):
    return Schedule("t", len(rows), m,
                    tuple(StageSpec(tuple(Action.parse(a, s) for a in r.split())) for s, r in enumerate(rows)))


def _error(schedule) -> str:
    with pytest.raises(ScheduleError) as e:
        validate(schedule)
    return str(e.value)


@pytest.mark.parametrize("name", ["gpipe", "1f1b", "recomp", "strawman", "obscura"])
@pytest.mark.parametrize("p,m", [(1, 1), (1, 5), (2, 1), (4, 8), (3, 7), (8, 3)])
def test_generated_schedules_validate(name, p, m):
    validate(generate(name, p, m))


def test_message_is_one_summary_line_then_the_grid_with_the_bad_action_marked():
    msg = _error(_rows("F0 F1 B0 B1", "F0 B0 F1 B1 B1"))
    lines = msg.splitlines()
    assert lines[0] == "invalid schedule 't': B1 at stage 1 step 4 is a duplicate (first at step 3)"
    assert lines[1].split()[:3] == ["step", "0", "1"]
    assert lines[3].startswith("stage 1") and lines[3].endswith("[B1]")
    assert "[" not in lines[2]


def test_missing_action_is_named_at_the_end_of_its_row():
    msg = _error(_rows("F0 F1 B0 B1", "F0 B0 F1"))
    assert msg.splitlines()[0].startswith("invalid schedule 't': stage 1 has no B1")
    assert msg.splitlines()[-1].endswith("<- stage 1 has no B1")


@pytest.mark.parametrize("row,needle", [
    ("B0 F0 F1 B1", "B0 at stage 1 step 0 comes before its F0"),
    ("F0 F1 B0 B1 F2", "F2 at stage 1 step 4: micro-batch 2 is outside 0..1"),
    ("F0 SO0 F1 B0 B1", "SO0 at stage 1 step 1 is never swapped back in"),
    ("F0 SI0 F1 B0 B1", "SI0 at stage 1 step 1 has no earlier SO0"),
    ("SO0 F0 SI0 F1 B0 B1", "SO0 at stage 1 step 0 comes before its F0"),
    ("F0 SO0 F1 B0 SI0 B1", "SI0 at stage 1 step 4 comes after B0 needed it"),
    ("F0 F1 W0 B0 B1", "W0 at stage 1 step 2 does not follow B0"),
])
def test_stage_rules(row, needle):
    msg = _error(_rows("F0 F1 B0 B1", row))
    assert needle in msg.splitlines()[0]
    assert "[" in msg.splitlines()[3]


@pytest.mark.parametrize("row", ["F1 F0 B0 B1", "F0 F1 B1 B0", "F1 F0 B1 B0", "F0 F1 I1 I0 W0 W1",
                                 "F0 F1 I1 W1 B0", "F0 F1 B1 I0 W0"])
def test_any_micro_batch_order_the_dependencies_allow_passes(row):
    """No FIFO rule: messages are named by their actions (deps.py), so stage 1 may
    take its micro-batches in any order its inputs allow (torch's LoopedBFS runs
    backwards in reverse)."""
    validate(_rows("F0 F1 B0 B1", row))
    validate(_rows("F0 F1 B1 B0", row.replace("I", "B").replace(" W0", "").replace(" W1", "")))


def test_an_order_whose_waits_cannot_be_met_is_still_a_deadlock():
    # stage 0 sends F0 only after B1, which needs stage 1's B1, which follows its F0, F1
    first = _error(_rows("F1 B1 F0 B0", "F0 B0 F1 B1")).splitlines()[0]
    assert "stage 0 step 1 waits at B1 for B1 on stage 1" in first and first.endswith("(and 1 more problem)")


def test_swaps_and_weight_grads_that_follow_the_rules_pass():
    validate(_rows("F0 F1 B0 W0 B1 W1", "F0 SO0 F1 SO1 SI0 B0 SI1 B1 W1"))


def test_deadlock_is_found_and_each_stuck_head_marked():
    # stage 0 wants B0 before stage 1 got F1; stage 1 wants F1 before its B0
    msg = _error(_rows("F0 B0 F1 B1", "F0 F1 B0 B1"))
    first = msg.splitlines()[0]
    assert "deadlock" in first and "stage 0 step 1 waits at B0 for B0 on stage 1" in first
    assert "and 1 more problem" in first
    grid = msg.splitlines()[1:]
    assert "[B0]" in grid[1] and "[F1]" in grid[2]


@pytest.mark.parametrize("how", ["drop", "duplicate", "b_before_f"])
@pytest.mark.parametrize("name", ["1f1b", "strawman", "obscura"])
def test_corruptions_are_rejected_with_the_grid(how, name):
    s = generate(name, 4, 8, adjusted=1, swap_blocks=1, swap_fraction=0.5)
    bad = corrupt(s, how, stage=1, pick=5)
    msg = _error(bad)
    assert msg.splitlines()[1].startswith("step")
    assert "[" in msg or "<-" in msg


def test_format_grid_aligns_columns():
    text = format_grid([["F0", "F10"], ["SO3"]], marks=[(1, 0)])
    head, r0, r1 = text.splitlines()
    assert r1.endswith("[SO3]")
    assert len({len(head), len(r0)}) == 1


def test_schedule_rejects_action_listed_under_another_stage():
    with pytest.raises(ScheduleError, match="listed under stage 1"):
        Schedule("t", 2, 1, (StageSpec((Action(0, Kind.F, 0),)), StageSpec((Action(0, Kind.F, 0),))))


def test_replace_row_helper_keeps_attributes():
    s = generate("obscura", 3, 4, adjusted=0)
    t = replace_row(s, 0, s.actions(0))
    assert t == s


@pytest.mark.parametrize("row,needle", [
    ("F0 F1 I0 W0", "stage 1 has no I1"),
    ("F0 F1 I0 I1 W0", "I1 at stage 1 step 3 has no W1"),
    ("F0 F1 W0 I0 I1 W1", "W0 at stage 1 step 2 does not follow I0"),
    ("F0 F1 I0 W0 B0 B1", "micro-batch 0 also has I0"),
    ("F0 F1 B0 I0 W0 B1", "B0 at stage 1 step 2: micro-batch 0 also has I0"),
])
def test_split_backward_rules(row, needle):
    msg = _error(_rows("F0 F1 B0 B1", row))
    assert needle in msg.splitlines()[0]


def test_split_backwards_that_follow_the_rules_pass():
    validate(_rows("F0 F1 I0 W0 I1 W1", "F0 F1 I0 I1 W0 W1"))
    validate(_rows("F0 F1 B0 I1 W1", "F0 F1 B0 W0 B1 W1"))      # full and split mixed; older B + W spelling


def _chunked(row0: str, row1: str):
    rows = tuple(tuple(Action.parse(a) for a in r.split()) for r in (row0, row1))
    return Schedule("v", 4, 1, tuple(StageSpec(()) for _ in range(4)), (0, 1, 1, 0), rows)


def test_chunked_schedules_name_devices_and_print_stage_first():
    validate(_chunked("0F0 3F0 3B0 0B0", "1F0 2F0 2B0 1B0"))
    msg = _error(_chunked("0F0 3F0 3B0 0B0", "2F0 1F0 2B0 1B0"))       # the turn of the V, wrong way round
    first = msg.splitlines()[0]
    assert first.startswith("invalid schedule 'v': deadlock: device 0 step 1 waits at 3F0 for 2F0 on device 1")
    assert first.endswith("(and 1 more problem)")
    assert msg.splitlines()[2].startswith("device 0") and "[2F0]" in msg.splitlines()[3]
    msg = _error(_chunked("0F0 3F0 3B0 0B0 0B0", "1F0 2F0 2B0 1B0"))
    assert "0B0 at device 0 step 4 is a duplicate (first at step 3)" in msg.splitlines()[0]


def test_a_schedule_that_passed_is_not_checked_again_under_another_name_or_swap_fraction(monkeypatch):
    """The memo is keyed on what the rules read (micro-batches, stage -> device map,
    rows): a renamed copy or one with other swap fractions is the same verdict; other
    rows are checked, and a bad one still fails."""
    import dataclasses

    from schedules import validator
    sched = generate("obscura", 4, 8, adjusted=1, swap_blocks=1, swap_fraction=0.5)
    validate(sched)
    checked = []
    monkeypatch.setattr(validator, "problems", lambda s: checked.append(s) or [])
    stages = tuple(dataclasses.replace(st, swap_fraction=0.25 if st.swap_fraction else 0.0) for st in sched.stages)
    validate(dataclasses.replace(sched, name="renamed", stages=stages))
    assert checked == []
    monkeypatch.undo()
    row = list(sched.rows[1])
    row.insert(0, row.pop(next(i for i, a in enumerate(row) if a.kind in (Kind.B, Kind.I))))   # B before F
    with pytest.raises(ScheduleError, match="renamed"):
        validate(dataclasses.replace(replace_row(sched, 1, row), name="renamed"))



def _walked_deadlock(schedule):
    """The walk the deadlock check was before it became the list scheduler's own
    "did not complete": the reference its problems must match."""
    rows = schedule.rows
    deps = dependency_table({a for row in rows for a in row}, schedule.num_stages)
    for a, b in schedule.overlapped:
        deps[a] = tuple(x for x in deps[a] + deps[b] if x not in (a, b))
    partner = {a: 1 for a, _ in schedule.overlapped}
    done, ptr, progress = set(), [0] * len(rows), True
    while progress:
        progress = False
        for d, row in enumerate(rows):
            while ptr[d] < len(row) and all(x in done for x in deps[row[ptr[d]]]):
                width = 1 + partner.get(row[ptr[d]], 0)
                done.update(row[ptr[d]:ptr[d] + width])
                ptr[d] += width
                progress = True
    name, labels, out = schedule.label, schedule.row_labels(), []
    for d, row in enumerate(rows):
        if ptr[d] < len(row):
            a = row[ptr[d]]
            dep = next(x for x in deps[a] if x not in done)
            out.append(Problem(d, ptr[d], f"deadlock: {labels[d]} step {ptr[d]} waits at {name(a)} for {name(dep)} "
                                          f"on {labels[schedule.stage_to_device[dep.stage]]}, which never runs"))
    return out


@settings(max_examples=examples(150), deadline=None, derandomize=True, database=None)
@given(st.sampled_from(["1f1b", "gpipe", "zb-h1", "interleaved", "zb-v", "looped-bfs"]), st.integers(2, 4),
       st.lists(st.tuples(st.integers(0, 7), st.integers(0, 100)), min_size=1, max_size=3))
def test_the_schedulers_stuck_actions_are_the_walks_deadlock(name, p, swaps):
    """Same-kind actions swapped (often a wait that cannot be met): the problems the
    list scheduler's stuck actions give are the walk's, message for message."""
    kw = {"virtual_stages": 2} if name in ("interleaved", "looped-bfs") else {}
    bad = generate(name, p, 2 * p, **kw)
    for stage, pick in swaps:
        bad = corrupt(bad, "swap_same_kind", stage % bad.num_devices, pick)
    assume(not any(_stage_problems(bad, s) for s in range(bad.num_stages)))
    assert _deadlock(bad) == _walked_deadlock(bad)


def test_a_stuck_overlapped_pair_is_the_walks_deadlock():
    """A pair that waits on its own unit (tests/schedules/formats/test_torch_csv.py): the
    scheduler stops at the pair, as the walk did, with the same message."""
    rows = [[Action.parse(a) for a in r.split()] for r in ("0F0 3F0 3B0 0F1 3F1 3B1 0B0 0B1",
                                                          "1F0 2F0 2B0 1B0 1F1 2F1 2B1 1B1")]
    pair = ((Action.parse("0F1"), Action.parse("3F1")),)
    stages = tuple(StageSpec(()) for _ in range(4))
    bad = Schedule("pair", 4, 2, stages, (0, 1, 1, 0), tuple(map(tuple, rows)), pair)
    assert _deadlock(bad) == _walked_deadlock(bad)
    assert "device 0 step 3 waits at 0F1 for 2F1 on device 1" in _deadlock(bad)[0].message
