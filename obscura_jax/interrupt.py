"""Ctrl-C on the command line: remembered as well as raised.

SIGINT raises KeyboardInterrupt as Python's own handler does, and also sets a flag,
because an interrupt can be lost or disguised: raised inside a callback Python runs
for a library (JAX's garbage-collection hook) it is printed and dropped, and the run
goes on; raised while an extension module initialises (`import jax`) it surfaces as
an ImportError, after the extension printed the cut-short import's traceback. So the trainer asks `raise_if_requested()` at each step, and the
command line counts any error that follows a Ctrl-C as the interrupt. Installed only
by the process entry point (obscura_jax/__main__.py, before the command line's
imports): library users keep their own SIGINT handling.
"""
from __future__ import annotations

import signal
import sys
import threading

_requested = threading.Event()


def install() -> None:
    """Ctrl-C from here on (idempotent). The interpreter's own start-up comes before."""
    signal.signal(signal.SIGINT, _on_sigint)
    sys.unraisablehook = _unraisable
    sys.excepthook = _excepthook


def _unraisable(info) -> None:
    """A dropped KeyboardInterrupt is already remembered: no 'Exception ignored' block."""
    if not issubclass(info.exc_type, KeyboardInterrupt):
        sys.__unraisablehook__(info)


def _excepthook(exc_type, exc, tb) -> None:
    """No traceback for an interrupt: also where an extension module prints the
    import that Ctrl-C cut short (numpy's C API does, before its ImportError)."""
    if not issubclass(exc_type, KeyboardInterrupt):
        sys.__excepthook__(exc_type, exc, tb)


def _on_sigint(signum, frame) -> None:
    _requested.set()
    raise KeyboardInterrupt


def requested() -> bool:
    """Whether Ctrl-C came since install()."""
    return _requested.is_set()


def raise_if_requested() -> None:
    """KeyboardInterrupt if Ctrl-C came and was swallowed on its way."""
    if _requested.is_set():
        raise KeyboardInterrupt
