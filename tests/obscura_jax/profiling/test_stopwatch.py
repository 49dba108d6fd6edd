"""obscura_jax.profiling.stopwatch.median_time: the one timing helper."""
import time

import jax.numpy as jnp
import pytest

from obscura_jax.profiling.stopwatch import median_time


def test_counts_warmup_samples_and_calls():
    calls = []
    t = median_time(lambda: calls.append(1), 3, calls=4, warmup=2)
    assert len(calls) == 2 + 3 * 4 and t >= 0


def test_per_call_time_of_a_sleep(monkeypatch):
    """On a clock that only the timed calls move (so load on the machine cannot
    change the answer): the median over samples of the per-call time."""
    import types

    from obscura_jax.profiling import stopwatch
    clock = [0.0]
    monkeypatch.setattr(stopwatch, "time", types.SimpleNamespace(perf_counter=lambda: clock[0]))
    steps = iter([0.5] + [0.01, 0.01, 0.01, 0.04, 0.04, 0.04, 0.01, 0.01, 0.01])   # warm-up, then 3 samples

    def call():
        clock[0] += next(steps)
    assert median_time(call, 3, calls=3) == pytest.approx(0.01)     # the slowed sample is not the median
    steps = iter([0.0] + [0.002] * 10)
    assert median_time(call, 2, calls=5) == pytest.approx(0.002)    # per call, not per sample


def test_a_real_sleep_is_never_timed_shorter_than_it_lasts():
    assert median_time(lambda: time.sleep(0.01), 3) >= 0.0099
    assert median_time(lambda: time.sleep(0.002), 2, calls=5) >= 0.00199


def test_sample_length_picks_the_number_of_calls():
    calls = []
    median_time(lambda: calls.append(jnp.ones(2)) or calls[-1], 2, min_sample_seconds=1e-9, max_calls=7)
    assert len(calls) == 1 + 1 + 2 * 1        # warm-up, the sizing call, 2 samples of 1 call
    slept = []
    median_time(lambda: slept.append(time.sleep(0.001)), 2, min_sample_seconds=1.0, max_calls=3)
    assert len(slept) == 1 + 1 + 2 * 3        # 1 s wanted from 1 ms calls: capped at 3 calls a sample


def test_sustain_runs_untimed_back_to_back_calls_first():
    from obscura_jax.profiling.stopwatch import sustain
    calls = []
    t0 = time.perf_counter()
    n = sustain(lambda: calls.append(jnp.ones(2)) or calls[-1], 0.05, wait_every=4)
    assert time.perf_counter() - t0 >= 0.05 and n == len(calls) >= 1
    calls.clear()
    median_time(lambda: calls.append(jnp.ones(2)) or calls[-1], 2, warmup=0, sustain_seconds=0.02)
    assert len(calls) > 2          # the sustained calls came before the 2 timed ones


def test_the_collector_is_off_in_the_samples_only():
    """As timeit does: no collection can land inside a sample; the collector is back
    as it was afterwards (and stays off if it was off)."""
    import gc

    seen = []
    assert gc.isenabled()
    median_time(lambda: seen.append(gc.isenabled()), 2, calls=2, warmup=1)
    assert seen == [True, False, False, False, False] and gc.isenabled()
    gc.disable()
    try:
        median_time(lambda: None, 1)
        assert not gc.isenabled()
    finally:
        gc.enable()
