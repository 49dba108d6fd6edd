"""scripts/layouts/layout_sweeps.py: the committed sweeps (results/sweeps) regenerate from the
script, byte for byte (one case here: 13B at 8k with the measured layer costs)."""
import os

import layout_sweeps


def test_a_committed_sweep_regenerates_byte_for_byte(tmp_path, capsys):
    stem = "llama2-13b_8k_measured"
    here = os.getcwd()
    os.chdir(layout_sweeps.ROOT)          # the measured layer file's path is relative to the root
    try:
        assert layout_sweeps.main(["--cases", stem, "--out", str(tmp_path)]) == 0
    finally:
        os.chdir(here)
    assert [p.name for p in tmp_path.iterdir()] == [f"{stem}.csv"]
    assert (tmp_path / f"{stem}.csv").read_bytes() == (layout_sweeps.ROOT / f"results/sweeps/{stem}.csv").read_bytes()
