"""torch.distributed.pipelining compute_only CSV: torch's published goldens (data/torch,
sources in its README) import, validate, simulate and draw; export -> import round-trips."""
import csv
from pathlib import Path

import pytest

from schedules import Action, Kind, ScheduleError, StageCosts, generate, simulate
from schedules.text import schedule_text, timeline_ascii
from schedules.torch_csv import from_torch_csv, load_torch_csv, save_torch_csv, to_torch_csv
from tests.schedules.helpers import longest_path_times

DATA = Path(__file__).parent / "data" / "torch"


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
    # (0F7;7B3)OVERLAP_F_B runs here as 0F7 then 7B3
    row = s.rows[0]
    i = row.index(Action(0, Kind.F, 7))
    assert row[i + 1] == Action(7, Kind.B, 3)
    tl = simulate(s, StageCosts.uniform(8, 1.0, 2.0, 0.0))
    assert tl.makespan > 0


@pytest.mark.parametrize("name", ["zb1p_2rank_2stagep_compute", "dualpipev_4rank_10mb"])
def test_golden_export_gives_back_torch_cells(name):
    text = (DATA / f"{name}.csv").read_text()
    s = from_torch_csv(text)
    expanded = [[a for c in row for a in (c[1:c.index(")")].split(";") if c.startswith("(") else [c])]
                for row in _cells(text)]
    assert _cells(to_torch_csv(s)) == expanded


@pytest.mark.parametrize("name,kw", [("zb-v", {}), ("interleaved", {"virtual_stages": 3}), ("zb-h1", {}),
                                     ("1f1b", {}), ("obscura", {"adjusted": 1})])
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
    assert back.rows == tuple(tuple(a for a in row if a.is_compute) for row in s.rows)
    assert back.adjusted_stages == ()


@pytest.mark.parametrize("text,needle", [
    ("0F0,0SEND_F0,0B0\n", "SEND_F action; only compute_only"),
    ("0F0,0UNSHARD\n", "UNSHARD action"),
    ("0F0,0Q0\n", "cannot parse '0Q0'"),
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
