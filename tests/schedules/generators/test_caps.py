"""The cap search (schedules.generators.caps) rests on two facts about the
relaxations, checked here on random schedules, costs and caps: a cap between what a
row holds at most under given caps and that cap gives the same run (so the bisection
may take such a trial as met), and a trial told a limit stops only when the full run
would end past it (and otherwise returns the full run)."""
import math
import random

import pytest

from schedules import StageCosts, generate
from schedules.errors import ScheduleError
from schedules.generators.caps import bisect_caps, held_peaks
from schedules.generators.common import one_f_one_b_row
from schedules.generators.device_relax import DeviceRelaxation
from schedules.generators.relax import relaxed_rows
from schedules.generators.strawman import strawman_warmup


def _costs(rng, n, zero_ok=True):
    zero = zero_ok and rng.random() < 0.2

    def val():
        return 0.0 if zero and rng.random() < 0.3 else rng.choice([0.5, 1.0, 2.0, rng.uniform(0.1, 3)])
    extra = {}
    if rng.random() < 0.5:
        extra = dict(boundary_bytes=tuple(rng.choice([0, 1e6, 3e6]) for _ in range(n)),
                     p2p_bandwidth=1e6 * rng.choice([1, 4, 10]))
    return StageCosts(fwd=tuple(val() for _ in range(n)), bwd=tuple(val() + 0.1 for _ in range(n)),
                      recompute=tuple(val() for _ in range(n)), **extra)


def _device_case(rng):
    name = rng.choice(["interleaved", "zb-h1", "zb-h1-capped", "1f1b", "zb-v", "interleaved-zb"])
    p, m = rng.choice([2, 3, 4, 6]), rng.choice([4, 6, 8, 12])
    kw = {"virtual_stages": 2} if name == "interleaved" else {}
    try:
        base = generate(name, p, m, adjusted="all", recompute=("full",), **kw)
    except ScheduleError:   # interleaved needs m to be a multiple of p
        return None
    held = held_peaks(base.rows)
    caps = {d: rng.randint(1, held[d] + 3) for d in range(base.num_devices) if rng.random() < 0.7}
    return DeviceRelaxation(base, _costs(rng, base.num_stages)), caps


def _stage_case(rng):
    p, m = rng.choice([2, 3, 4, 6]), rng.choice([4, 6, 8, 12])
    adj = set(range(rng.randint(1, p)))
    fixed = {s: one_f_one_b_row(s, m, min(p - s, m)) for s in range(p) if s not in adj}
    straw = strawman_warmup(p, m, adj)
    costs = _costs(rng, p)
    caps = {s: rng.randint(max(1, min(m, p - s) - 1), straw[s]) for s in adj}

    def relax(c, limit=math.inf):
        try:
            return relaxed_rows(p, m, fixed, c, costs, adj, limit)
        except ScheduleError:    # the fixed rows deadlock under these caps
            return None
    return relax, caps


def _runs(kind: str, rng):
    """Endless (relax, caps, relax(caps)) of random cases that run (no deadlock)."""
    while True:
        case = _device_case(rng) if kind == "device" else _stage_case(rng)
        if case is not None and (run := case[0](case[1])) is not None:
            yield case[0], case[1], run


@pytest.mark.parametrize("kind", ["device", "stage"])
@pytest.mark.parametrize("seed", range(4))
def test_a_cap_at_least_the_rows_peak_gives_the_same_run(kind, seed):
    checked = 0
    for relax, caps, run in _runs(kind, random.Random(seed)):
        if checked >= 60:
            break
        peak = held_peaks(run[0])
        for r, cap in caps.items():
            for c in range(peak[r], cap + 1):
                assert relax({**caps, r: c}) == run
                checked += 1


@pytest.mark.parametrize("kind", ["device", "stage"])
def test_a_limit_stops_only_runs_that_end_past_it(kind):
    for done, (relax, caps, run) in enumerate(_runs(kind, random.Random(11))):
        if done >= 80:
            break
        for limit in (run[1], run[1] * 1.001, run[1] * 0.999, run[1] * 0.5):
            cut = relax(caps, limit)
            met = cut is not None and cut[1] <= limit
            assert met == (run[1] <= limit)
            if met:
                assert cut == run


def test_bisection_finds_the_smallest_cap_that_meets_the_target():
    # uniform costs: the makespan is monotone in each cap, so the answer is each row's
    # smallest cap meeting the target with the others at their answers
    base = generate("zb-h1-capped", 4, 8, adjusted="all", recompute=("full",))
    relax = DeviceRelaxation(base, StageCosts.uniform(4, 1.0, 2.0, 1.0))
    start = {d: 8 for d in range(4)}
    found = relax(start)
    caps, (rows, t) = bisect_caps(relax, start, {}, found, found[1])
    assert t <= found[1] and (rows, t) == relax(caps)
    for d in caps:
        if caps[d] > 1:
            smaller = relax({**caps, d: caps[d] - 1})
            assert smaller is None or smaller[1] > found[1]
