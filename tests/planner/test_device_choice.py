"""planner.device_choice: each device's least recompute time that fits, against a
brute force over every combination of its stages' choices."""
import itertools
import random

import pytest

from planner.device_choice import _greedy, choose_device, leanest
from planner.recompute.memory_rows import MemoryRows
from planner.recompute.recompute_options import Option, pareto


def _front(rng, n):
    opts = [Option(frozenset({f"op{i}"}) if i else frozenset(), rng.uniform(0, 5) if i else 0.0,
                   rng.uniform(1, 10), rng.uniform(0, 2)) for i in range(n)]
    return pareto(opts)


def _instance(seed, chunks):
    rng = random.Random(seed)
    opts = [_front(rng, rng.randint(2, 9)) for _ in range(chunks)]
    rows = MemoryRows(0, tuple(range(chunks)), tuple(
        (tuple(float(rng.randint(0, 4)) for _ in range(chunks)), rng.uniform(0, 5)) for _ in range(rng.randint(1, 6))))
    return rows, opts


def _brute(rows, opts, room):
    best = None
    for combo in itertools.product(*opts):
        peak = rows.peak([o.kept for o in combo]) + max(o.work for o in combo)
        if peak <= room:
            t = sum(o.time for o in combo)
            if best is None or t < best - 1e-12:
                best = t
    return best


@pytest.mark.parametrize("seed", range(40))
@pytest.mark.parametrize("chunks", [1, 2, 3])
def test_exact_search_matches_brute_force(seed, chunks):
    rows, opts = _instance(seed, chunks)
    lean = leanest(rows, opts).peak
    fast = rows.peak([o[0].kept for o in opts]) + max(o[0].work for o in opts)
    for room in (lean * 0.99, lean, (lean + fast) / 2, fast * 1.01):
        got = choose_device(rows, opts, room)
        want = _brute(rows, opts, room)
        if want is None:
            assert got is None
        else:
            assert got is not None and got.peak <= room + 1e-9
            assert got.time == pytest.approx(want)


@pytest.mark.parametrize("seed", range(20))
def test_many_combinations_start_from_the_greedy(seed, monkeypatch):
    """Devices with many combinations start from the greedy choice (which fits),
    then search depth-first under its time: on these instances, the optimum."""
    rng = random.Random(seed)
    opts = [_front(rng, 12) for _ in range(4)]
    rows = MemoryRows(0, (0, 1, 2, 3), (((3.0, 2.0, 1.0, 1.0), 0.0), ((1.0, 3.0, 2.0, 2.0), 2.0)))
    room = leanest(rows, opts).peak * 1.3
    greedy = _greedy(rows, opts, room)
    assert greedy is not None and greedy.peak <= room + 1e-9
    monkeypatch.setattr("planner.device_choice.ENUMERATE", 1)
    got = choose_device(rows, opts, room)
    assert got.peak <= room + 1e-9 and got.time <= greedy.time + 1e-12
    assert got.time == pytest.approx(_brute(rows, opts, room))
