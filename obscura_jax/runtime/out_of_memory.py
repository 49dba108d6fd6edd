"""An out-of-memory on a device, said in one line: XLA's RESOURCE_EXHAUSTED (a
JaxRuntimeError from a program's dispatch, its result, or a compilation) becomes a
DeviceOutOfMemory naming the device and the program that allocated ("F3 of stage
2", "the optimizer step of stage 1"); the trainer adds the run's estimate beside the
device's limit and what to reduce (obscura_jax.run.memory_check.explain). It is an
ObscuraError: the CLI prints it as `obscura: error: ...` with exit status 2, and
every process of a multi-process run stops with the same line (the watchdog's
abort, obscura_jax.processes.distributed).

Test hook (used only by the tests; nothing reads it unless it is set):
OBSCURA_TEST_OUT_OF_MEMORY=ACTION[@N] makes a stage worker raise XLA's
RESOURCE_EXHAUSTED error instead of issuing ACTION (the long form, e.g. 2F3) the
N-th time (default 1) this process issues it: as a real allocation failure there
would, without a device that fills up.
"""
from __future__ import annotations

import contextlib
import os
import threading

import jax

from obscura_jax.errors import RunError
from schedules.ir import Action

TEST_HOOK = "OBSCURA_TEST_OUT_OF_MEMORY"
MARK = "RESOURCE_EXHAUSTED"


class DeviceOutOfMemory(RunError):
    """A device ran out of memory in a named program."""

    def __init__(self, device: str | None, where: str, detail: str, context: str = "",
                 process: int | None = None):
        self.device, self.where, self.detail, self.context, self.process = device, where, detail, context, process
        on = f"device {device}" if device else "a device"
        who = f"process {process}: " if process is not None else ""
        super().__init__(f"{who}{on} ran out of memory in {where} ({detail})" + (f"; {context}" if context else ""))

    def with_context(self, context: str, process: int | None = None) -> "DeviceOutOfMemory":
        return DeviceOutOfMemory(self.device, self.where, self.detail, context, process)


def is_out_of_memory(error: BaseException) -> bool:
    """XLA's allocation failure (RESOURCE_EXHAUSTED), as JAX raises it."""
    return isinstance(error, (jax.errors.JaxRuntimeError, RuntimeError)) and MARK in str(error)


def detail_of(error: BaseException) -> str:
    """XLA's own first line, shortened."""
    text = str(error).strip().splitlines()
    return (text[0] if text else MARK)[:160]


def action_text(action: Action) -> str:
    """'F3 of stage 2'."""
    return f"{action} of stage {action.stage}"


@contextlib.contextmanager
def naming(where: str, device: str | None = None):
    """Turn an out-of-memory raised inside into a DeviceOutOfMemory naming `where`."""
    try:
        yield
    except DeviceOutOfMemory:
        raise
    except Exception as e:
        if is_out_of_memory(e):
            raise DeviceOutOfMemory(device, where, detail_of(e)) from None
        raise


class _Hook:
    """The test hook's state: which action, on which of its issues, and the count."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seen = 0

    def check(self, action: Action, text: str) -> None:
        target, _, nth = text.partition("@")
        if action.long != target.strip():
            return
        with self.lock:
            self.seen += 1
            hit = self.seen == int(nth or 1)
        if hit:
            raise jax.errors.JaxRuntimeError(f"{MARK}: Out of memory while trying to allocate the outputs of "
                                             f"{action.long} (injected by {TEST_HOOK})")


_HOOK = _Hook()


def injected_setting() -> str | None:
    """The hook's setting for this step, or None (read once per worker and step)."""
    return os.environ.get(TEST_HOOK) or None


def maybe_inject(action: Action, setting: str | None) -> None:
    if setting is not None:
        _HOOK.check(action, setting)
