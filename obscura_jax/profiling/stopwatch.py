"""The one way the project times JAX work: the median over samples of back-to-back
calls, each sample ending when the last call's output is ready.

    median_time(lambda: f(x), samples=5)                      # one blocking call a sample
    median_time(lambda: f(x), samples=3, calls=10)            # dispatch 10, wait once
    median_time(lambda: f(x), samples=3, min_sample_seconds=0.02)   # enough calls for 20 ms
    median_time(lambda: f(x), samples=3, min_sample_seconds=0.2, sustain_seconds=2.0)

Back-to-back calls keep the device busy between dispatches, so short programs are
timed without the host's dispatch gaps; one call a sample measures what a single
blocking run costs. The median drops the samples that background load slowed.

`sustain_seconds` first keeps the device busy that long with back-to-back calls, so
the samples see its steady state: a GPU at its power cap runs slower than the
boost clock a short blocking burst gets (measured on the H200: ~1500 vs ~1970 MHz,
about 10% per program; results/h200/power_cap). Only the newest result of
back-to-back calls is kept alive, so memory stays bounded by the device's queue.

The garbage collector is off while the samples run, as in `timeit`: a collection
inside a sample of a launch-bound program (tens of microseconds) would be most of
it, and a process with raised thresholds (obscura_jax.cli.gc_policy) collects rarely
but longer.
"""
from __future__ import annotations

import contextlib
import gc
import math
import statistics
import time
from typing import Callable

import jax


def median_time(fn: Callable[[], object], samples: int, *, calls: int = 1, warmup: int = 1,
                min_sample_seconds: float | None = None, max_calls: int = 50,
                sustain_seconds: float = 0.0) -> float:
    """Median seconds per call of `fn()` over `samples` samples (see sample_times)."""
    return statistics.median(sample_times(fn, samples, calls=calls, warmup=warmup,
                                          min_sample_seconds=min_sample_seconds, max_calls=max_calls,
                                          sustain_seconds=sustain_seconds))


def sample_times(fn: Callable[[], object], samples: int, *, calls: int = 1, warmup: int = 1,
                 min_sample_seconds: float | None = None, max_calls: int = 50,
                 sustain_seconds: float = 0.0) -> list[float]:
    """Seconds per call of `fn()` in each of `samples` samples of `calls` back-to-back
    calls, after `warmup` untimed calls and (if given) `sustain_seconds` of untimed
    back-to-back calls. With `min_sample_seconds`, `calls` is chosen (at most
    `max_calls`) so one sample lasts about that long, from one more timed call."""
    for _ in range(warmup):
        jax.block_until_ready(fn())
    if sustain_seconds > 0:
        sustain(fn, sustain_seconds)
    if min_sample_seconds is not None:
        t0 = time.perf_counter()
        jax.block_until_ready(fn())
        one = max(time.perf_counter() - t0, 1e-6)
        calls = max(1, min(max_calls, math.ceil(min_sample_seconds / one)))
    times = []
    with collector_off():
        for _ in range(max(samples, 1)):
            t0 = time.perf_counter()
            out = None
            for _ in range(calls):
                out = fn()
            jax.block_until_ready(out)
            times.append((time.perf_counter() - t0) / calls)
    return times


@contextlib.contextmanager
def collector_off():
    """The cyclic garbage collector off for the block, back as it was after."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def sustain(fn: Callable[[], object], seconds: float, *, wait_every: int = 8) -> int:
    """Call `fn()` back to back for at least `seconds` (untimed load), keeping only the
    newest result; waits for it every `wait_every` calls so the host never queues
    more than that ahead of the device. Returns the number of calls."""
    deadline = time.perf_counter() + seconds
    n, out = 0, None
    while n == 0 or time.perf_counter() < deadline:
        out = fn()
        n += 1
        if n % wait_every == 0:
            jax.block_until_ready(out)
    jax.block_until_ready(out)
    return n
