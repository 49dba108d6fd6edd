"""scripts/layouts/layout_matrix.py on one small layout: a family that trains on a 2-stage x
2-data mesh is checked equal through the CLI, an unknown family is a row that is not
equal, and the script then exits 1 with both rows in its JSON."""
import json
import sys

import pytest

import layout_matrix


@pytest.mark.slow
def test_one_layout_equal_and_a_bad_row_fails_the_script(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["layout_matrix.py", "--model", "gpt3-tiny", "--layouts", "2,2,1",
                                      "--schedules", "1f1b,no-such-family", "--out", str(tmp_path)])
    assert layout_matrix.main() == 1
    printed = capsys.readouterr().out
    assert "gpt3-tiny: 1 of 2 runs equal the unpipelined model" in printed
    rows = json.loads((tmp_path / "layout_matrix_gpt3-tiny.json").read_text())
    assert [(r["stages"], r["data"], r["tensor"], r["schedule"]) for r in rows] == \
        [(2, 2, 1, "1f1b"), (2, 2, 1, "no-such-family")]
    good, bad = rows
    assert good["equal"] and good["exit"] == 0 and "(equal at" in good["check"]
    assert not bad["equal"] and bad["exit"] == 2 and "unknown schedule 'no-such-family'" in bad["error"]
