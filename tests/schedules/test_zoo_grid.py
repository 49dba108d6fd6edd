"""The schedule zoo's figures (BENCHMARKS.md "Schedule zoo"): unit-cost table and a
subset of the Obscura-on-today's-schedules grid with its invariants."""
import pytest

from schedules import zoo_grid as Z


def test_unit_table():
    rows = {u.schedule: u for u in Z.unit_rows()}
    assert {k: u.makespan for k, u in rows.items()} == {"1f1b": 33, "zb-h1": 27, "zb-h1-capped": 30, "zb-v": 25.5,
                                                        "interleaved": 28.5, "interleaved-zb": 25.5}
    assert rows["zb-h1-capped"].inflight == rows["1f1b"].inflight == (4, 3, 2, 1)
    assert rows["zb-h1"].inflight == (4, 4, 4, 4)        # until W; I frees nothing under these costs
    assert rows["zb-v"].peak_bytes == (4.0,) * 4 and rows["interleaved"].peak_bytes == (5.5, 4.5, 3.5, 2.5)
    assert "| zb-v | 25.5 | 8 8 8 8 | 4 4 4 4 |" in Z.unit_markdown(list(rows.values()))


@pytest.mark.parametrize("base", Z.ZOO_BASES)
def test_grid_subset_has_no_violations(base):
    rows = Z.zoo_rows(bases=(base,), ps=(4,), ms=(8, 16), ks=(0, 2), rs=(0.4, 1.0))
    assert len(rows) == 8 and not [v for g in rows for v in g.violations()]
    for g in rows:
        assert g.migrate <= g.obscura * (1 + 1e-9) and g.plain <= g.obscura <= g.recomp_all
    table = Z.zoo_markdown(rows)
    assert table.count("| yes |") == 8 and "NO" not in table


def test_violations_are_reported():
    g = Z.ZooRow("zb-h1-capped", 4, 8, 0, 1.0, 30, 44, 35, 36, 35, (4, 3), (5, 3), (7, 3))
    assert g.violations() == ["obscura 36 > Recomp-K 35", "device 0: obscura holds 5 micro-batches, Recomp-K 4"]
    assert "| NO |" in Z.zoo_markdown([g])
