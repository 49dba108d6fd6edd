"""scripts/figures/fig_zoo.py on a small setting (analytic H200 profile, Llama-2 18B, p = 4,
GBS 8): a PNG and a CSV with DAPPLE+, Obscura's search, every schedule family at its
best plan and the pick, which is the fastest family that fits; a family that does
not fit says what it needs, one not evaluated why."""
import pytest

from planner.families import FAMILIES
from tests.tooling.test_paper_figures import _num, _run


@pytest.mark.slow
def test_fig_zoo(tmp_path):
    rows = _run("fig_zoo", tmp_path, "--families", "llama2", "--sizes", "18b", "--batches", "8", "--stages", "4")
    assert [r["system"] for r in rows] == (["dapple_plus", "obscura"] + [f"family:{f.name}" for f in FAMILIES]
                                           + ["pick"])
    by = {r["system"]: r for r in rows}
    families = [r for r in rows if r["system"].startswith("family:")]
    fitting = [_num(r["iteration_s"]) for r in families if r["fits"] == "True"]
    assert _num(by["pick"]["iteration_s"]) == pytest.approx(min(fitting))
    for r in families:
        if r["evaluated"] != "True":
            assert r["note"] and not r["iteration_s"]
        elif r["fits"] == "True":
            assert _num(r["max_device_peak_gib"]) <= 80 and r["variant"]
            assert _num(r["unlimited_s"]) <= _num(r["iteration_s"]) * (1 + 1e-9)
        else:
            assert _num(r["needs_gib"]) > 80
