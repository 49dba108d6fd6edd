"""A trial started from an earlier run (generators/relaxation.py) is the trial run
whole: on random relaxations of both kinds (Obscura on 1F1B; any schedule's device
rows), costs (uniform, random, small integers with many ties, shared links) and
caps, a walk like the bisection's (each trial one cap below the last run that met
the target, the target that run's makespan or a little under or over it) gives,
trial by trial, the verdict of a fresh relaxation (nothing remembered), and where
the trial meets the target, its rows and makespan exactly. And the list scheduler
resumed from a run's first actions, or paused and resumed, is that run."""
import math
import random

import pytest

from schedules import StageCosts, generate
from schedules.errors import ScheduleError
from schedules.generators.caps import held_peaks
from schedules.generators.common import one_f_one_b_row
from schedules.generators.device_relax import DeviceRelaxation
from schedules.generators.relax import StageRelaxation
from schedules.generators.strawman import strawman_warmup
from schedules.scheduling.list_schedule import Known, list_schedule


def _costs(rng, n):
    kind = rng.choice(["uniform", "random", "integer", "links"])
    if kind == "uniform":
        return StageCosts.uniform(n, 1.0, 2.0, rng.choice([0.0, 1.0]), action_overhead=rng.choice([0.0, 0.3]))
    if kind == "integer":       # many events at one time
        f = [rng.choice([1, 2]) for _ in range(n)]
        return StageCosts(fwd=tuple(f), bwd=tuple(x * rng.choice([1, 2, 3]) for x in f),
                          recompute=tuple(rng.choice([0, 1]) for _ in range(n)), p2p_latency=rng.choice([0, 0.5, 1]))
    f = [rng.uniform(0.3, 2.0) for _ in range(n)]
    extra = {}
    if kind == "links":
        extra = dict(boundary_bytes=tuple(rng.choice([0.0, 1.0, 3.0]) for _ in range(n)),
                     p2p_bandwidth=rng.choice([2.0, 10.0]), link_sharing=rng.choice([0.0, 0.5]))
    return StageCosts(fwd=tuple(f), bwd=tuple(x * rng.uniform(1, 3) for x in f),
                      recompute=tuple(x * rng.uniform(0, 1) for x in f), p2p_latency=rng.choice([0, 0.1, 0.3]),
                      **extra)


def _stage_case(rng):
    p, m = rng.randint(2, 10), rng.randint(1, 40)
    adj = set(range(rng.randint(1, p))) if rng.random() < 0.7 else set(rng.sample(range(p), rng.randint(1, p)))
    fixed = {s: one_f_one_b_row(s, m, min(p - s, m)) for s in range(p) if s not in adj}
    straw = strawman_warmup(p, m, adj)
    caps = {s: straw[s] for s in adj}
    costs, swapping = _costs(rng, p), [s for s in range(p) if rng.random() < 0.3]
    return (lambda: StageRelaxation(p, m, fixed, caps, costs, adj, swapping)), caps


def _device_case(rng):
    name = rng.choice(["interleaved", "zb-h1", "zb-h1-capped", "1f1b", "interleaved-zb"])
    p, m = rng.choice([2, 3, 4, 6]), rng.choice([4, 6, 8, 12, 16])
    kw = {"virtual_stages": 2} if name in ("interleaved", "interleaved-zb") else {}
    try:
        base = generate(name, p, m, adjusted="all", recompute=("full",), **kw)
    except ScheduleError:       # the chunked orders need m to be a multiple of p
        return None
    held = held_peaks(base.rows)
    caps = {d: held[d] + rng.randint(0, 3) for d in range(base.num_devices) if rng.random() < 0.8}
    costs = _costs(rng, base.num_stages)
    return ((lambda: DeviceRelaxation(base, costs)), caps) if caps else None


def _call(relax, caps, limit):
    try:
        return relax(caps, limit)
    except ScheduleError:       # caps under which the fixed rows deadlock
        return "deadlock"


def _met(out, limit) -> bool:
    return out not in (None, "deadlock") and out[1] <= limit


@pytest.mark.parametrize("seed", range(4))
def test_a_trial_from_an_earlier_run_is_the_trial_run_whole(seed):
    rng = random.Random(seed)
    trials = 0
    while trials < 150:
        case = _stage_case(rng) if rng.random() < 0.6 else _device_case(rng)
        if case is None:
            continue
        fresh, caps = case
        relax = fresh()           # remembers the runs that met their limit
        found = _call(relax, caps, math.inf)
        if found in (None, "deadlock"):
            continue
        target = found[1] * rng.choice([1.0, 1.0 + 1e-9, 1.05, 0.99])
        for _ in range(8):
            r = rng.choice(list(caps))
            if caps[r] <= 1:
                continue
            trial = {**caps, r: rng.randint(1, caps[r] - 1)}
            near, whole = _call(relax, trial, target), _call(fresh(), trial, target)
            trials += 1
            assert _met(near, target) == _met(whole, target)
            if _met(whole, target):
                assert near == whole
                caps = trial


def _relaxed_run(rng):
    while True:
        case = _stage_case(rng)
        relax = case[0]().relax
        if relax.incremental:
            return relax, case[1]


@pytest.mark.parametrize("seed", range(3))
def test_the_loop_resumed_from_a_runs_first_actions_or_paused_is_that_run(seed):
    rng = random.Random(seed)
    for _ in range(30):
        relax, caps = _relaxed_run(rng)
        whole = list_schedule(relax.run, relax.choosers(caps))
        if not whole.complete:
            continue
        at = rng.uniform(0, whole.makespan)
        counts = [sum(1 for i in ids if whole.start[i] < at) for ids in whole.order]
        resumed = list_schedule(relax.run, relax.choosers(caps), known=Known(whole.start, whole.end, whole.order,
                                                                             counts, at))
        assert (resumed.order, resumed.start, resumed.end) == (whole.order, whole.start, whole.end)
        paused = list_schedule(relax.run, relax.choosers(caps), until=at)
        if paused.paused:         # else no device had a choice left to make at `at` or later
            assert paused.stopped >= at
            counts = [sum(1 for i in ids if paused.start[i] < paused.stopped) for ids in paused.order]
            paused = list_schedule(relax.run, relax.choosers(caps),
                                   known=Known(paused.start, paused.end, paused.order, counts, paused.stopped))
        assert (paused.order, paused.end) == (whole.order, whole.end)
