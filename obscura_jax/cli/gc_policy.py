"""The cyclic garbage collector's thresholds for a process that traces and compiles.

JAX tracing and lowering allocate many short-lived objects (tracers, jaxpr
equations, MLIR handles), so with CPython's default thresholds (700, 10, 10) the
collector runs thousands of times per command and its full collections walk
every object the imports left behind: 0.62-0.71 of ~7 CPU-s in a 4-stage `obscura
train --check` on llama2-tiny, 4.0 of 62 CPU-s in a pytest process running the
numerics tests (a 2-core CPU machine, measured with gc.callbacks; BENCHMARKS.md "Test suite time").
With BATCH_THRESHOLDS it is 0.12-0.16 and 1.0 CPU-s, the same peak memory. Only
how often the collector runs changes: nothing is left uncollected. mypy raises its
thresholds for the same reason.

The `obscura` command sets them on its first line; a program of one's own that
builds pipelines can call `for_batch_process()` itself.
"""
from __future__ import annotations

import gc

BATCH_THRESHOLDS = (50_000, 20, 20)    # (young, middle, old) generation thresholds


def for_batch_process() -> None:
    """Collect this process's cycles less often: after BATCH_THRESHOLDS[0] net
    allocations instead of 700 (see the module docstring)."""
    gc.set_threshold(*BATCH_THRESHOLDS)
