import subprocess
import sys
from pathlib import Path

import pytest

from schedules import StageCosts, generate, simulate
from schedules.gantt import draw_gantt, draw_gantts, draw_memory
from schedules.paper_figures import fig05_rows

ROOT = Path(__file__).resolve().parents[2]


def test_fig05_rows_match_the_acceptance_makespans():
    rows, _ = fig05_rows()
    got = {r.config: r.makespan for r in rows}
    assert got["Recomp-Non"] == 33 and got["Recomp-0"] == 38 and got["Recomp-All"] == 44
    assert got["Strawman-0"] == 34 and got["Strawman-0"] <= got["Recomp-0"] <= got["Recomp-1"] <= got["Recomp-All"]
    assert [r.overhead_pct for r in rows][:4] == pytest.approx([0, 100 * 5 / 33, 100 * 7 / 33, 100 * 11 / 33])


def test_gantt_and_memory_files(tmp_path):
    costs = StageCosts.uniform(3, 1, 2, 1, act_bytes=1.0, host_bandwidth=2.0)
    tl = simulate(generate("obscura", 3, 6, adjusted=0, swap_blocks=1, swap_fraction=1.0), costs)
    files = draw_gantt(tl, tmp_path / "a.png", title="x") + draw_memory(tl, tmp_path / "m.png", svg=False)
    files += draw_gantts([tl, tl], tmp_path / "b.png", svg=False, same_scale=False)
    assert [f.name for f in files] == ["a.png", "a.svg", "m.png", "b.png"]
    assert all(f.stat().st_size > 1000 for f in files)
    assert "makespan" in (tmp_path / "a.svg").read_text()
    with pytest.raises(ValueError):
        draw_gantts([], tmp_path / "c.png")


@pytest.mark.slow
@pytest.mark.parametrize("script,expected", [
    ("fig05_bubbles.py", ["fig05_bubbles.csv", "fig05_bubbles.png", "fig05_gantt.svg"]),
    ("draw_schedules.py", ["fig02_bubbles.png", "fig04_strawman.svg", "fig06_relaxation.png",
                           "fig09_swapping.png", "fig09_memory.png"]),
])
def test_scripts(tmp_path, script, expected):
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / script), "--out", str(tmp_path)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    for name in expected:
        assert (tmp_path / name).stat().st_size > 500
    if script == "fig05_bubbles.py":
        assert "Recomp-0" in r.stdout and "+15.2%" in r.stdout and "+19%" in r.stdout
