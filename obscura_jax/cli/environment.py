"""The environment variables the project reads, checked before any work: a bad value
is one line naming the variable (exit 2), not a traceback deep in a child process
or in JAX's import (issue 24).

OBSCURA_COORDINATOR, OBSCURA_NUM_PROCESSES, OBSCURA_PROCESS_ID, OBSCURA_TRANSFER_ADDRESS,
OBSCURA_LOCAL_DEVICE_IDS, OBSCURA_HEARTBEAT_SECONDS, OBSCURA_STEP_STALL_SECONDS,
OBSCURA_CONNECT_SECONDS (obscura_jax.processes.launch, docs/multiprocess.md; OBSCURA_LOG_FILE
takes any path, checked when it is opened) and JAX_ENABLE_X64 (JAX parses it when it
is imported).
OBSCURA_DEBUG takes any value. An empty variable counts as unset, as the readers do."""
from __future__ import annotations

import math
import os
import re

from obscura_jax.errors import UsageError

ADDRESS = re.compile(r"\[?[\w.:-]+\]?:\d+")
JAX_BOOLS = ("y", "yes", "t", "true", "on", "1", "n", "no", "f", "false", "off", "0")
MAX_SECONDS = 10 ** 6


def _int(text: str, low: int) -> bool:
    return re.fullmatch(r"\d+", text.strip()) is not None and int(text) >= low


def _seconds(text: str) -> bool:
    try:
        v = float(text)
    except ValueError:
        return False
    return math.isfinite(v) and 0 < v <= MAX_SECONDS


CHECKS = {
    "OBSCURA_COORDINATOR": (lambda v: ADDRESS.fullmatch(v) is not None, "HOST:PORT"),
    "OBSCURA_NUM_PROCESSES": (lambda v: _int(v, 1), "an integer >= 1"),
    "OBSCURA_PROCESS_ID": (lambda v: _int(v, 0), "an integer >= 0"),
    "OBSCURA_TRANSFER_ADDRESS": (lambda v: ADDRESS.fullmatch(v) is not None, "IP:PORT"),
    "OBSCURA_LOCAL_DEVICE_IDS": (lambda v: all(_int(t, 0) for t in v.split(",")),
                                 "comma-separated device indices >= 0, e.g. 0,1"),
    "OBSCURA_HEARTBEAT_SECONDS": (_seconds, f"a number of seconds in (0, {MAX_SECONDS}]"),
    "OBSCURA_STEP_STALL_SECONDS": (_seconds, f"a number of seconds in (0, {MAX_SECONDS}]"),
    "OBSCURA_CONNECT_SECONDS": (_seconds, f"a number of seconds in (0, {MAX_SECONDS}]"),
    "JAX_ENABLE_X64": (lambda v: v.strip().lower() in JAX_BOOLS, "true or false (or 1 / 0)"),
}


def check_environment(environ=os.environ) -> None:
    """One line naming the first variable with a value its reader would not take."""
    for name, (ok, what) in CHECKS.items():
        value = environ.get(name)
        if value and not ok(value):
            raise UsageError(f"environment variable {name} must be {what}, got {value[:80]!r}")
