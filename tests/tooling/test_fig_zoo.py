"""scripts/fig_zoo.py on a small setting (analytic H200 profile, Llama-2 18B, p = 4,
GBS 8): a PNG and a CSV with every system, and the planner's pick is the fastest
system that fits."""
import pytest

from experiments.figures import ZOO_SYSTEMS
from tests.tooling.test_paper_figures import _num, _run


@pytest.mark.slow
def test_fig_zoo(tmp_path):
    rows = _run("fig_zoo", tmp_path, "--families", "llama2", "--sizes", "18b", "--batches", "8", "--stages", "4")
    assert [r["system"] for r in rows] == list(ZOO_SYSTEMS)
    by = {r["system"]: r for r in rows}
    fitting = [_num(r["iteration_s"]) for r in rows if r["fits"] == "True"]
    assert _num(by["pick"]["iteration_s"]) == min(fitting)
    assert by["interleaved_full"]["schedule"] == "interleaved" and by["interleaved_full"]["virtual_stages"] == "2"
    assert by["zb_h1_full"]["schedule"] == "zb-h1" and by["obscura"]["schedule"] in ("obscura", "1f1b")
    for r in rows:
        assert (r["fits"] == "True") == (_num(r["max_device_peak_gib"]) <= 80)
