"""scripts/tables/zero_bubble_memory.py: the simulated table of each zero-bubble family's
largest device peak against 1F1B's, and its one-line refusals."""
import re

import zero_bubble_memory as Z


def test_the_table_puts_zb_h1_and_balanced_zb_v_at_or_under_1f1b(capsys):
    """On the profile that measures what I allocates beside the residuals (the H100's)."""
    assert Z.main(["--stages", "4", "--profile", "results/h100/profile_v7/profile_llama2-13b.json"]) == 0
    row = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| 4 |")]
    assert len(row) == 1
    one_f, zb_h1, zb_v, balanced, time_ratio = (float(v) for v in re.findall(r"\d+\.\d+", row[0]))
    assert zb_v > one_f and balanced <= one_f and zb_h1 <= one_f and 0 < time_ratio < 1


def test_bad_input_is_one_line(capsys):
    assert Z.main(["--stages", "four"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "zero_bubble_memory: error: --stages must be a comma list of pipeline depths, got 'four'"
