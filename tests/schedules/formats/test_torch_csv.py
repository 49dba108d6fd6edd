"""torch.distributed.pipelining compute_only CSV: torch's published goldens (data/torch,
sources in its README) import, validate, simulate and draw; export -> import round-trips."""
import csv
from pathlib import Path

import pytest

from schedules import Action, Kind, ScheduleError, StageCosts, generate, simulate
from schedules.actions import COMPUTE_KINDS
from schedules.formats.text import timeline_ascii
from schedules.formats.torch_csv import from_torch_csv, load_torch_csv, save_torch_csv, to_torch_csv
from tests.schedules.helpers import longest_path_times, schedule_text

DATA = Path(__file__).parents[1] / "data" / "torch"


def _cells(text):
    return [[c for c in row if c] for row in csv.reader(text.splitlines())]


def test_interleaved_zero_bubble_golden_imports_validates_simulates():
    s = load_torch_csv(DATA / "zb1p_2rank_2stagep_compute.csv")
    assert (s.num_stages, s.num_devices, s.num_microbatches) == (4, 2, 8)
    assert s.stage_to_device == (0, 1, 0, 1)            # torch's looped placement, inferred from the rows
    assert s.rows[0][:3] == (Action(0, Kind.F, 0), Action(0, Kind.F, 1), Action(2, Kind.F, 0))
    assert {a.kind for row in s.rows for a in row} == {Kind.F, Kind.I, Kind.W}
    costs = StageCosts.uniform(4, 1.0, 2.0, 0.0, act_bytes=1.0)
    tl = simulate(s, costs)
    ref = longest_path_times(s, costs)
    assert tl.makespan == pytest.approx(max(e for _, e in ref.values()))
    for o in tl.ops:
        assert (o.start, o.end) == pytest.approx(ref[(o.stage, o.action)])
    assert sum(st.compute for st in tl.stages) == pytest.approx(4 * 8 * 3)   # every F, I, W ran once
    assert "device 0 |" in timeline_ascii(tl) and "0F0" in schedule_text(s)


def test_older_b_plus_w_spelling_is_the_same_schedule():
    new = load_torch_csv(DATA / "zb1p_2rank_2stagep_compute.csv")
    old = load_torch_csv(DATA / "zb1p_2rank_2stagep_compute_bw.csv")
    costs = StageCosts.uniform(4, 1.0, 2.0, 0.0, weight_grad_fraction=0.25)
    a, b = simulate(new, costs), simulate(old, costs)
    assert [(o.stage, o.start, o.end) for o in a.ops] == [(o.stage, o.start, o.end) for o in b.ops]
    assert to_torch_csv(old) == to_torch_csv(new)       # B followed by W exports as I


def test_dualpipev_golden_with_overlapped_pairs_imports():
    s = load_torch_csv(DATA / "dualpipev_4rank_10mb.csv")
    assert s.stage_to_device == (0, 1, 2, 3, 3, 2, 1, 0)   # the V
    assert s.num_microbatches == 10
    # (0F7;7B3)OVERLAP_F_B: 0F7 then 7B3, adjacent and kept as one unit
    row = s.rows[0]
    i = row.index(Action(0, Kind.F, 7))
    assert row[i + 1] == Action(7, Kind.B, 3)
    assert (Action(0, Kind.F, 7), Action(7, Kind.B, 3)) in s.overlapped
    assert len(s.overlapped) == text_count(DATA / "dualpipev_4rank_10mb.csv", "OVERLAP_F_B")
    tl = simulate(s, StageCosts.uniform(8, 1.0, 2.0, 0.0))
    assert sum(st.compute for st in tl.stages) == pytest.approx(8 * 10 * 3)   # every pair's halves ran once


def text_count(path, needle):
    return path.read_text().count(needle)


# m = 2, stages 0..3 on ranks (0, 1, 1, 0); rank 0 overlaps 0F1 with 3B0
PAIR_CSV = ("0F0,3F0,(0F1;3B0)OVERLAP_F_B,3F1,3B1,0B0,0B1\n"
            "1F0,2F0,1F1,2B0,1B0,2F1,2B1,1B1\n")


def test_an_overlapped_pair_is_one_unit_whose_outputs_leave_at_its_end():
    s = from_torch_csv(PAIR_CSV)
    assert s.overlapped == ((Action(0, Kind.F, 1), Action(3, Kind.B, 0)),)
    costs = StageCosts.uniform(4, 1.0, 2.0, 0.0)
    t = {(o.stage, o.action): (o.start, o.end) for o in simulate(s, costs).ops}
    # the unit starts at 4, when 3B0's input (3F0) is there, though 0F1's was at 1
    assert t[(0, "F1")] == (4, 5) and t[(3, "B0")] == (5, 7)       # halves back to back: F + B
    assert t[(1, "F1")][0] == 7       # 0F1's activation leaves with the unit, at 7, not at 5
    plain = from_torch_csv(PAIR_CSV.replace("(0F1;3B0)OVERLAP_F_B", "0F1,3B0"))
    assert plain.overlapped == ()
    assert {(o.stage, o.action): o.start for o in simulate(plain, costs).ops}[(1, "F1")] == 5


def test_a_pair_waiting_on_its_own_unit_is_a_deadlock():
    # 3F1 needs 2F1, which needs 0F1's output: run one after the other they pass,
    # as one unit (0F1's output leaves at the unit's end) they wait on each other
    rows = "0F0,3F0,3B0,{},3B1,0B0,0B1\n1F0,2F0,2B0,1B0,1F1,2F1,2B1,1B1\n"
    from_torch_csv(rows.format("0F1,3F1"))
    with pytest.raises(ScheduleError, match="deadlock: device 0 step 3 waits at 0F1 for 2F1 on device 1"):
        from_torch_csv(rows.format("(0F1;3F1)OVERLAP_F_B"))


@pytest.mark.parametrize("name", ["zb1p_2rank_2stagep_compute", "dualpipev_4rank_10mb"])
def test_golden_export_gives_back_torch_cells(name):
    text = (DATA / f"{name}.csv").read_text()
    assert _cells(to_torch_csv(from_torch_csv(text))) == _cells(text)


def test_reduce_grad_and_fsdp_cells_are_skipped_with_one_note():
    text = "0F0,0UNSHARD,0F1,0B0,0B1,0REDUCE_GRAD,0RESHARD\n1F0,1F1,1B0,1B1,1REDUCE_GRAD\n"
    notes = []
    s = from_torch_csv(text, notes=notes)
    assert s.rows == from_torch_csv("0F0,0F1,0B0,0B1\n1F0,1F1,1B0,1B1\n").rows
    assert notes == ["torch CSV: skipped 2 REDUCE_GRAD, 1 RESHARD, 1 UNSHARD cells (gradient reduction and FSDP "
                     "sharding run no stage compute; not modelled)"]
    notes = []
    from_torch_csv("0F0,0B0\n", notes=notes)
    assert notes == []


def test_without_a_notes_list_the_note_is_logged_once(caplog):
    with caplog.at_level("WARNING", logger="schedules.formats.torch_csv"):
        from_torch_csv("0F0,0B0,0REDUCE_GRAD\n1F0,1B0,1REDUCE_GRAD\n")
    assert [r.getMessage() for r in caplog.records] == [
        "note: torch CSV: skipped 2 REDUCE_GRAD cells (gradient reduction and FSDP sharding run no stage compute; "
        "not modelled)"]


@pytest.mark.parametrize("name,kw", [("zb-v", {}), ("interleaved", {"virtual_stages": 3}), ("zb-h1", {}),
                                     ("zb-h1-capped", {}), ("interleaved-zb", {}), ("looped-bfs", {}),
                                     ("1f1b", {}), ("obscura", {"adjusted": 1}), ("zb-h2", {}), ("zb-1p", {}),
                                     ("zb-2p", {}), ("v-half", {}), ("v-min", {})])
def test_ours_export_import_round_trip(tmp_path, name, kw):
    s = generate(name, 4, 8, **kw)
    path = tmp_path / "s.csv"
    save_torch_csv(s, path)
    back = load_torch_csv(path, name=s.name)
    assert back.rows == s.rows and back.stage_to_device == s.stage_to_device
    assert back.num_microbatches == s.num_microbatches


def test_swaps_and_recompute_are_left_out_of_the_export():
    s = generate("obscura", 4, 8, adjusted=1, swap_blocks=2, swap_fraction=0.5)
    back = from_torch_csv(to_torch_csv(s))
    assert back.rows == tuple(tuple(a for a in row if a.kind in COMPUTE_KINDS) for row in s.rows)
    assert back.adjusted_stages == ()


@pytest.mark.parametrize("text,needle", [
    ("0F0,0SEND_F0,0B0\n", "SEND_F action; only compute_only"),
    ("0F0,0RECV_B1,0B0\n", "RECV_B action; only compute_only"),
    ("0F0,0Q0\n", "cannot parse '0Q0'"),
    ("0F0,(0B0)OVERLAP_F_B\n", "an OVERLAP_F_B cell holds two compute actions"),
    ("0F0,(0B0;0UNSHARD)OVERLAP_F_B\n", "an OVERLAP_F_B cell holds two compute actions"),
    ("0F0,(0F1;0B0;0B1)OVERLAP_F_B\n", "an OVERLAP_F_B cell holds two compute actions"),
    ("0F0,0OVERLAP_F_B\n", "cannot parse '0OVERLAP_F_B'"),
    ("0F0,1F0\n1B0,0B0\n", "stage 1 appears on rank 0 and on rank 1"),
    ("0F0,0B0\n2F0,2B0\n", "stage 1 has no actions"),
    ("", "no actions"),
    ("0F0,1F0,1B0,0B0\n,\n", "rank 1 has no actions"),
    ("0F0,0B0,0B0\n", "duplicate"),
    ("0F0,0I0\n", "has no W0"),
])
def test_bad_csv_is_one_clear_line(text, needle):
    with pytest.raises(ScheduleError) as e:
        from_torch_csv(text)
    assert needle in str(e.value).splitlines()[0]


def test_missing_file_and_micro_batch_count(tmp_path):
    with pytest.raises(ScheduleError, match="torch CSV not found"):
        load_torch_csv(tmp_path / "none.csv")
    with pytest.raises(ScheduleError, match="micro-batch 7 is used"):
        from_torch_csv((DATA / "zb1p_2rank_2stagep_compute.csv").read_text(), num_microbatches=4)
    with pytest.raises(ScheduleError, match="stage 0 has no F8"):
        from_torch_csv((DATA / "zb1p_2rank_2stagep_compute.csv").read_text(), num_microbatches=9)


@pytest.mark.parametrize("text,needle", [
    ("0F99999999999,0B99999999999\n", "rank 0 step 0: '0F99999999999': micro-batch index 99999999999 is past"),
    ("0F" + "9" * 5000 + "\n", "micro-batch index of 5000 digits is past this tool's bound"),
    ("".join(f"{s}F0\n" for s in range(3000)), "torch CSV: 3000 rows (ranks); number of stages must be <= 1024"),
    ("0F0\n2000F0\n", "rank 1 step 0: '2000F0': stage index 2000 is past"),
    ("".join(f"{s}F0,{s}B0\n" for s in range(299)) + "299F299,299B299\n",
     "stages x micro-batches must be <= 65536, got 300 x 300"),
    (",".join(["0F0"] * 600_000), "torch CSV: at least 600000 actions; at most 524288 are read"),
    ("x" * 200_000 + "\n", "torch CSV: line 1: field larger than field limit"),
])
def test_csv_past_the_bounds_is_one_line_at_once(text, needle):
    """Bounded before anything is built: one line within a second of
    this process's CPU time (not wall time: a busy machine is not a bug)."""
    import time
    t0 = time.process_time()
    with pytest.raises(ScheduleError) as e:
        from_torch_csv(text)
    assert time.process_time() - t0 < 1.0
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_load_torch_csv_opens_only_regular_files(tmp_path):
    import os
    os.mkfifo(tmp_path / "fifo.csv")
    with pytest.raises(ScheduleError, match="torch CSV .*fifo.csv: is a FIFO, not a regular file"):
        load_torch_csv(tmp_path / "fifo.csv")
    with pytest.raises(ScheduleError, match="torch CSV /dev/zero: is a character device"):
        load_torch_csv("/dev/zero")
