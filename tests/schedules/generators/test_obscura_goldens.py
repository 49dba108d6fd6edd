"""The Obscura generators give today's outputs, digit for digit: rows, stage
settings, makespan and every statistic of the simulated timeline, over the grid of
tests/schedules/obscura_goldens.py (sizes, adjusted sets, uniform, heterogeneous,
integer and zero costs, swaps, fixed caps, obscura-* on today's schedules). The
goldens were written by scripts/goldens/make_obscura_goldens.py before the cap search was
made faster; a speed change must leave them as they are."""
import pytest

from tests.schedules.obscura_goldens import CASES, LARGE, key, load, render

GOLDEN = load()


def test_every_case_has_a_golden():
    assert {key(c) for c in CASES + LARGE} == set(GOLDEN)


@pytest.mark.parametrize("case", CASES, ids=key)
def test_the_generator_gives_the_golden(case):
    assert render(case) == GOLDEN[key(case)]


@pytest.mark.slow
@pytest.mark.parametrize("case", [c for c in LARGE if c["p"] <= 32], ids=key)
def test_the_benchmark_sizes_give_the_golden(case):
    assert render(case) == GOLDEN[key(case)]
