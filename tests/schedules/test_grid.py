import pytest

from schedules.grid import closed_rule_vs_search, grid_ks, grid_row, markdown, run_grid


@pytest.mark.slow
def test_invariant_grid_holds_everywhere():
    """p in {4,8}, m in {8,16,32,64}, K in {0,1,2,p/2}, r in {1, 0.4}, f=1, b=2:
    obscura <= strawman <= recomp (same K) and obscura in-flight <= strawman's."""
    rows = run_grid()
    assert len(rows) == 56
    assert [(g.p, g.m, g.k, g.r, v) for g in rows for v in g.violations()] == []
    for g in rows:
        assert g.plain <= g.obscura and g.recomp <= g.recomp_all   # the ceiling and the baseline
        # lower bound: stage s starts at s*f, works m*(f+b_s), then its last gradient
        # crosses stages s-1..0; with uniform costs both orders reach it
        b = [2 + (g.r if s <= g.k else 0.0) for s in range(g.p)]
        bound = max(s + g.m * (1 + b[s]) + sum(b[:s]) for s in range(g.p))
        assert g.strawman == pytest.approx(bound) and g.obscura == pytest.approx(bound)
    table = markdown(rows)
    assert table.count("\n") == 57 and "| NO |" not in table


def test_grid_point_p4_m8_k0():
    g = grid_row(4, 8, 0, 1.0)
    assert (g.plain, g.recomp_all, g.recomp, g.strawman, g.obscura) == (33, 44, 38, 34, 34)
    assert grid_ks(4) == (0, 1, 2) and grid_ks(8) == (0, 1, 2, 4)


def test_violations_are_reported():
    g = grid_row(4, 8, 1, 1.0)
    broken = type(g)(**{**g.__dict__, "obscura": g.strawman + 1, "inflight_obscura": (99,) * 4})
    assert len(broken.violations()) == 1 + 4


def test_cap_search_is_never_slower_than_strawman_on_random_costs():
    out = closed_rule_vs_search(25, seed=1)
    assert out["search_slower_than_strawman"] == 0
