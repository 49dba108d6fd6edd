"""Faults injected into a multi-process run, for the tests that check how one is
stopped: load it in every process with `--model-module tests/obscura_jax/faults.py`
(the launcher hands each process the same flags). Read here, not by the library:

    OBSCURA_TEST_HANG=RANK:STEP          process RANK stops making progress after
                                         STEP (its watchdog still beats)
    OBSCURA_TEST_SWAP_TRANSFERS=RANK     process RANK plans its first two
                                         cross-process transfers in the other order

The process's rank is the launcher's OBSCURA_PROCESS_ID."""
from __future__ import annotations

import os
import threading

from obscura_jax.processes import distributed
from obscura_jax.processes.launch import ENV_ID

RANK = os.environ.get(ENV_ID)
HANG_RANK, _, HANG_STEP = os.environ.get("OBSCURA_TEST_HANG", "").partition(":")
SWAP_RANK = os.environ.get("OBSCURA_TEST_SWAP_TRANSFERS")

if RANK is not None and RANK == HANG_RANK and HANG_STEP:
    _progress = distributed.DistributedGroup.progress

    def progress(self, what: str, step_seconds: float | None = None) -> None:
        _progress(self, what, step_seconds)
        if step_seconds is not None and what == f"step {HANG_STEP}":
            threading.Event().wait()          # stuck, yet its watchdog still beats

    distributed.DistributedGroup.progress = progress

if RANK is not None and RANK == SWAP_RANK:
    _transport = distributed.DistributedGroup.transport

    def transport(self, *args, **kwargs):
        made = _transport(self, *args, **kwargs)
        set_order = made.set_order

        def swapped(order, routes) -> None:
            set_order(order, routes)
            if len(made.plan) > 1:            # an order that differs from the other processes'
                made.plan[0], made.plan[1] = made.plan[1], made.plan[0]
        made.set_order = swapped
        return made

    distributed.DistributedGroup.transport = transport
