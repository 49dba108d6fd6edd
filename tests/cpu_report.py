"""A pytest plugin that records where the suite's CPU time goes: each test's CPU
seconds (user + system) of its own process and of the child processes it waited for
(resource.getrusage, RUSAGE_SELF and RUSAGE_CHILDREN), setup, call and teardown
together, and its wall seconds. Wall time says which test is the run's tail; CPU
time says what a test costs the 2 cores whatever ran beside it.

    OBSCURA_CPU_REPORT=cpu.jsonl pytest -p tests.cpu_report -q XDIST   (the Makefile's XDIST flags)

Each process (every xdist worker) appends one JSON line per test to the file:
{"test", "module", "self_s", "children_s", "wall_s", "worker"}.
scripts/bench/suite_cpu.py runs the suite this way and prints the table."""
from __future__ import annotations

import json
import os
import resource
import time

import pytest


def _cpu(who: int) -> float:
    r = resource.getrusage(who)
    return r.ru_utime + r.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    path = os.environ.get("OBSCURA_CPU_REPORT")
    if not path:
        yield
        return
    s0, c0, w0 = _cpu(resource.RUSAGE_SELF), _cpu(resource.RUSAGE_CHILDREN), time.monotonic()
    yield
    row = {"test": item.nodeid, "module": item.nodeid.split("::")[0],
           "self_s": round(_cpu(resource.RUSAGE_SELF) - s0, 3),
           "children_s": round(_cpu(resource.RUSAGE_CHILDREN) - c0, 3),
           "wall_s": round(time.monotonic() - w0, 3),
           "worker": os.environ.get("PYTEST_XDIST_WORKER", "main")}
    with open(path, "a") as f:     # one short line a write: the workers' lines do not interleave
        f.write(json.dumps(row) + "\n")
