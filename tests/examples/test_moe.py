"""examples/moe.py: a MoE model with an auxiliary load-balancing loss equals the
unpipelined model under 1F1B, Obscura and ZB-H1 on 4 emulated devices, through
`obscura train --check` (the example runs the three and exits non-zero otherwise)."""
import pytest

from tests.examples.helpers import run_example


@pytest.mark.slow
def test_moe_with_an_aux_loss_equals_the_unpipelined_model(tmp_path):
    r = run_example("moe.py", cwd=tmp_path, timeout=1200)
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("moe-tiny ")]
    assert [ln.split(":")[0] for ln in lines] == ["moe-tiny 1f1b", "moe-tiny obscura", "moe-tiny zb-h1"]
    assert all("(equal at rtol" in ln for ln in lines), r.stdout
