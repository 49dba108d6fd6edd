"""Ctrl-C and SIGTERM on the command line: remembered as well as raised.

SIGTERM (what batch schedulers send before preemption, and `kill`'s default) is
handled as Ctrl-C is, raised as `Terminated` (a KeyboardInterrupt, so every path
that ends a command on Ctrl-C ends it the same way): one line, exit 143 instead of
130. One difference: a training run asks for SIGTERM to wait while a step runs
(`defer_sigterm`), so that it can checkpoint the last completed step and stop there
(obscura_jax/checkpoints/stop.py); Ctrl-C is never deferred.

SIGINT raises KeyboardInterrupt as Python's own handler does, and also sets a flag,
because an interrupt can be lost or disguised: raised inside a callback Python runs
for a library (JAX's garbage-collection hook) it is printed and dropped, and the run
goes on. So the trainer asks `raise_if_requested()` at each step, and the command
line counts any error that follows a Ctrl-C as the interrupt.

While an extension module initialises (`import jax` runs jaxlib's C++ module init,
which calls back into Python), an exception raised in those callbacks can abort the
process (SIGABRT, seen from jaxlib) or turn into an ImportError after the extension
printed the cut-short import (numpy's C API). So Ctrl-C there is deferred: a helper
thread sends SIGINT again once the main thread has left the extension's set-up, and
the handler raises then.

After Ctrl-C the run is being abandoned, and the libraries it cuts short say so in
their own words: Orbax logs its interrupted save's traceback (`wait_until_finished`:
"Save Finalize thread failed"), an asyncio loop it left open fails in `__del__`, a
worker thread dies of the unwinding. None of that is news to the person who pressed
Ctrl-C, and the run's one line must stay one line: so from the first Ctrl-C on,
logging is switched off (`logging.disable`) and unraisable and thread exceptions are
dropped.

Installed only by the process entry point (obscura_jax/__main__.py, before the command
line's imports): library users keep their own SIGINT handling.

What an interrupted run leaves: `train` names its checkpoint directory
(`note_checkpoint_dir`), and the one line Ctrl-C prints names the last complete
checkpoint step in it (`interrupted_line`), read from the directory itself (Orbax
renames a step's directory to its number only once it is complete), so the
launcher of several processes, which saves nothing itself, says the same.

A test that sends Ctrl-C waits until the handler is there (the interpreter's own
start-up comes before it, and no handler covers that): with OBSCURA_TEST_READY_FD=N,
a pipe's write end the test passed, the entry point writes "ready" to N once
install() has run (announce_ready).
"""
from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from importlib.machinery import ExtensionFileLoader
from pathlib import Path

_requested = threading.Event()     # an interrupt is being raised (Ctrl-C, or SIGTERM not deferred)
_sigterm = threading.Event()       # SIGTERM came (raised, or waiting for the step to end)
_defer_sigterm = False             # a training step runs: SIGTERM waits for its end
_kind = "SIGINT"                   # the interrupt being raised: SIGINT or SIGTERM
EXIT_CODES = {"SIGINT": 130, "SIGTERM": 143}    # 128 + the signal's number, as a shell shows it
_UNSET = object()
_checkpoint_dir = _UNSET     # the running train's --checkpoint-dir (None: it saves none)


def note_checkpoint_dir(directory) -> None:
    """The running `train` saves its checkpoints in `directory` (None: it saves none)."""
    global _checkpoint_dir
    _checkpoint_dir = directory


def note_train_argv(argv: list[str]) -> None:
    """At start-up, before anything else can be interrupted: a `train` command line
    names its checkpoint directory (or none)."""
    if not argv or argv[0] != "train":
        return
    directory = None
    for i, a in enumerate(argv):
        if a == "--checkpoint-dir" and i + 1 < len(argv):
            directory = argv[i + 1]
        elif a.startswith("--checkpoint-dir="):
            directory = a.split("=", 1)[1]
    note_checkpoint_dir(directory)


def note_checkpoint(directory, step: int) -> None:
    """A checkpoint of `step` is complete in `directory` (kept for library callers
    that never called note_checkpoint_dir)."""
    global _checkpoint_dir
    if _checkpoint_dir is _UNSET or _checkpoint_dir is None:
        _checkpoint_dir = directory


def last_checkpoint_step(directory) -> int | None:
    """The newest complete checkpoint step in `directory` (None: none, or no directory)."""
    try:
        steps = [int(p.name) for p in Path(directory).iterdir() if p.name.isdigit() and p.is_dir()]
    except OSError:
        return None
    return max(steps, default=None)


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where Ctrl-C would be; `who` names the processes that got it
    in a run of several (every process raises it at the same step)."""

    def __init__(self, who: tuple[int, ...] = ()):
        super().__init__()
        self.who = tuple(who)


def interrupted_line(prog: str = "obscura", kind: str | None = None) -> str:
    """The one line Ctrl-C (or SIGTERM: `kind`, default the interrupt being raised)
    prints: for a train, the last complete checkpoint step."""
    what = "interrupted" if (kind or _kind) == "SIGINT" else "terminated by SIGTERM"
    return f"{prog}: {what}{checkpoint_note()}"


def checkpoint_note() -> str:
    """'' for a command that is no train; else '; ' and where its last complete checkpoint is."""
    if _checkpoint_dir is _UNSET:
        return ""
    if _checkpoint_dir is None:
        return "; no checkpoint saved (no --checkpoint-dir)"
    step = last_checkpoint_step(_checkpoint_dir)
    if step is None:
        return f"; no complete checkpoint in {_checkpoint_dir} yet"
    return f"; last complete checkpoint: step {step} in {_checkpoint_dir} (continue with --resume)"


def exit_code() -> int:
    """130 after Ctrl-C, 143 after SIGTERM (128 + the signal's number)."""
    return EXIT_CODES[_kind]


def install() -> None:
    """Ctrl-C and SIGTERM from here on (idempotent). The interpreter's own start-up
    comes before."""
    signal.signal(signal.SIGINT, _on_sigint)
    signal.signal(signal.SIGTERM, _on_sigterm)
    sys.unraisablehook = _unraisable
    sys.excepthook = _excepthook
    threading.excepthook = _thread_excepthook


ENV_READY_FD = "OBSCURA_TEST_READY_FD"    # test hook: a descriptor told "ready\n" after install()


def announce_ready() -> None:
    """Write "ready" to the descriptor OBSCURA_TEST_READY_FD names and close it. The
    variable is removed first, so no process this one starts writes to a descriptor
    of that number (it would be another file there)."""
    fd = os.environ.pop(ENV_READY_FD, None)
    if fd is None:
        return
    try:
        os.write(int(fd), b"ready\n")
        os.close(int(fd))
    except (OSError, ValueError):
        pass


def _unraisable(info) -> None:
    """A dropped KeyboardInterrupt (raised in a callback Python cannot propagate from,
    such as JAX's garbage-collection hook, which runs at any allocation: `plan` ran on
    to the end and replaced its output, 3 moments of 17) is sent again, to land where
    it can be raised; no 'Exception ignored' block."""
    if issubclass(info.exc_type, KeyboardInterrupt):
        _send_again_soon()
    elif not _requested.is_set():     # after Ctrl-C: a library's teardown noise (see above)
        sys.__unraisablehook__(info)


def _thread_excepthook(args) -> None:
    """A thread's uncaught exception, unless Ctrl-C came: then it is the unwinding."""
    if not _requested.is_set() and not issubclass(args.exc_type, KeyboardInterrupt):
        threading.__excepthook__(args)


def _send_again_soon() -> None:
    """SIGINT again from a helper thread (one at a time) once the main thread has left
    this hook (an interrupt raised inside it is dropped too): the handler then runs at
    the main thread's next safe point."""
    if not _resend.acquire(blocking=False):
        return
    main = threading.main_thread().ident

    def again() -> None:
        while _in_code(sys._current_frames().get(main), (_unraisable.__code__,)):
            time.sleep(0.005)
        _resend.release()
        os.kill(os.getpid(), signal.Signals[_kind])
    threading.Thread(target=again, daemon=True, name="ctrl-c after a dropped interrupt").start()


def _excepthook(exc_type, exc, tb) -> None:
    """No traceback for an interrupt: also where an extension module prints the
    import that Ctrl-C cut short (numpy's C API does, before its ImportError)."""
    if not issubclass(exc_type, KeyboardInterrupt):
        sys.__excepthook__(exc_type, exc, tb)


def _on_sigint(signum, frame) -> None:
    _raise("SIGINT", frame)


def _on_sigterm(signum, frame) -> None:
    _sigterm.set()
    if _defer_sigterm and not _requested.is_set():
        return                                # the running step ends first (defer_sigterm)
    _raise("SIGTERM", frame)


def _raise(kind: str, frame) -> None:
    global _kind
    if not _requested.is_set() or kind == "SIGINT":   # Ctrl-C after SIGTERM: Ctrl-C's line and code
        _kind = kind
    if not _requested.is_set():
        _requested.set()
        logging.disable(logging.CRITICAL)     # the libraries' own words on being cut short (see above)
    if in_extension_init(frame):
        _send_again_after_init(signal.Signals[kind])
        return
    raise KeyboardInterrupt if _kind == "SIGINT" else Terminated()


# the frames an extension module's set-up runs under (importlib's own code objects)
_EXTENSION_INIT = (ExtensionFileLoader.create_module.__code__, ExtensionFileLoader.exec_module.__code__)


def in_extension_init(frame) -> bool:
    """Whether `frame` (or a caller of it) is an extension module being created or
    executed: Python code a C extension calls while it is imported."""
    return _in_code(frame, _EXTENSION_INIT)


def _in_code(frame, codes) -> bool:
    """Whether `frame` or one of its callers runs one of `codes`."""
    while frame is not None:
        if frame.f_code in codes:
            return True
        frame = frame.f_back
    return False


_resend = threading.Lock()    # held while a re-send waits: several Ctrl-C in one init, one interrupt


def _send_again_after_init(signum: int = signal.SIGINT) -> None:
    if not _resend.acquire(blocking=False):
        return
    main = threading.main_thread().ident

    def wait() -> None:
        while in_extension_init(sys._current_frames().get(main)):
            time.sleep(0.01)
        _resend.release()
        os.kill(os.getpid(), signum)    # handled again, now where raising is safe
    threading.Thread(target=wait, daemon=True, name="ctrl-c after extension init").start()


def requested() -> bool:
    """Whether Ctrl-C (or a SIGTERM that was raised) came since install()."""
    return _requested.is_set()


def raise_if_requested() -> None:
    """KeyboardInterrupt (Terminated for SIGTERM) if one came and was swallowed on its way."""
    if _requested.is_set():
        raise KeyboardInterrupt if _kind == "SIGINT" else Terminated()


def defer_sigterm(on: bool, handled: bool = False) -> None:
    """While on, SIGTERM is only noted (sigterm_pending): the caller, a training loop,
    stops at the end of the running step and calls terminate(). Turned off, a SIGTERM
    that came meanwhile and was not acted on is sent again, to be raised at once;
    unless `handled` (the launcher of several processes forwards it instead)."""
    global _defer_sigterm
    _defer_sigterm = on
    if not on and not handled and _sigterm.is_set() and not _requested.is_set():
        os.kill(os.getpid(), signal.SIGTERM)


def sigterm_pending() -> bool:
    """Whether SIGTERM came since install() (raised or deferred)."""
    return _sigterm.is_set()


def terminate(who: tuple[int, ...] = ()) -> None:
    """Raise Terminated, as SIGTERM's handler does (the deferred stop's end)."""
    global _kind
    _kind = "SIGTERM"
    if not _requested.is_set():
        _requested.set()
        logging.disable(logging.CRITICAL)
    raise Terminated(who)
