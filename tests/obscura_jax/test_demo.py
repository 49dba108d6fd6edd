"""`obscura compare --demo` (what `make demo` runs), shortened: llama2-tiny learns
stdlib text on 4 emulated CPU devices under 1F1B and Obscura, in one process."""
import json

import pytest

from obscura_jax.cli import main

pytestmark = pytest.mark.slow


def test_demo_loss_falls_and_writes_measured_gantts(tmp_path, capsys):
    out = tmp_path / "demo"
    assert main(["compare", "--demo", "--steps", "8", "--cost-reps", "1", "--no-progress",
                 "--out", str(out)]) == 0
    res = json.loads((out / "compare.json").read_text())["runs"]
    assert [r["schedule"] for r in res] == ["1f1b", "obscura"]
    for r in res:
        assert r["data"] == "stdlib" and r["model"] == "llama2-tiny" and len(set(r["devices"])) == 4
        assert len(r["losses"]) == 8
        assert r["losses"][-1] < r["losses"][0] - 0.5, r["losses"]
    obscura = res[1]
    assert obscura["adjusted_stages"] == [0, 1] and obscura["swap"]["bytes_out"] > 0
    # Same data, same math: both schedules see the same losses.
    assert res[0]["losses"] == pytest.approx(res[1]["losses"], rel=1e-5)
    # Recompute on stages 0-1 lowers their peak memory below 1F1B's.
    assert obscura["stages"][0]["peak_bytes"] < res[0]["stages"][0]["peak_bytes"]
    for name in ("measured.png", "1f1b_measured.png", "obscura_measured.png", "table.txt"):
        assert (out / name).stat().st_size > 0
    table = capsys.readouterr().out
    assert "tokens/s" in table and "obscura:adjusted=1" in table
