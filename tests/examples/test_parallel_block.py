"""examples/parallel_block.py: a parallel-block (GPT-NeoX) model, units embed,
block_i, head, equals the unpipelined model under 1F1B, Obscura and ZB-H1 on 4
emulated devices through `obscura train --check` (the example exits non-zero
otherwise)."""
import pytest

from tests.examples.helpers import run_example


@pytest.mark.slow
def test_parallel_block_equals_the_unpipelined_model(tmp_path):
    r = run_example("parallel_block.py", cwd=tmp_path, timeout=1200)
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("parallel-tiny ")]
    assert [ln.split(":")[0] for ln in lines] == ["parallel-tiny 1f1b", "parallel-tiny obscura",
                                                  "parallel-tiny zb-h1"]
    assert all("(equal at rtol" in ln for ln in lines), r.stdout
