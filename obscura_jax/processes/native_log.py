"""C and C++ output of a process of several goes to a log file, not the terminal.

A process of a multi-process run loads libraries that print on their own: Gloo's
"[Gloo] Rank 1 is connected to 1 peer ranks..." when the CPU collectives connect,
XLA's and gRPC's absl log lines ("E1205 ... slow_operation_alarm.cc ...", the
coordination service's start-up). They write to file descriptors 1 and 2 directly,
whatever TF_CPP_MIN_LOG_LEVEL says for some of them. So `divert(path)` points
descriptors 1 and 2 at `path` and moves Python's sys.stdout and sys.stderr onto
copies of the original descriptors: what the run prints itself (its report, its
one-line errors) still reaches the terminal or the launcher, everything native goes
to the log. A native crash's own words (an XLA `F...` check failure) are in the log
too: the launcher quotes the log's last fatal line when it names the process
(obscura_jax.processes.supervise), and docs/multiprocess.md says where the log is.
"""
from __future__ import annotations

import faulthandler
import os
import re
import sys
import tempfile

ENV_LOG_FILE = "OBSCURA_LOG_FILE"


def default_path(rank: int) -> str:
    """A process's log when OBSCURA_LOG_FILE does not name one (several hosts)."""
    return os.path.join(tempfile.gettempdir(), f"obscura-p{rank}-{os.getpid()}.log")


def divert(path: str) -> None:
    """Descriptors 1 and 2 to `path` (appended); sys.stdout and sys.stderr keep
    the original ones. An OSError if `path` cannot be opened (nothing changed then)."""
    log = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        for fd, name in ((1, "stdout"), (2, "stderr")):
            _keep_python_stream(fd, name)
            os.dup2(log, fd)
    finally:
        os.close(log)
    if faulthandler.is_enabled():          # its stacks on the new stderr, beside our lines
        faulthandler.enable(file=sys.stderr)


def _keep_python_stream(fd: int, name: str) -> None:
    """sys.<name> onto a copy of descriptor `fd`, before `fd` is taken (the command
    line's StdoutAfterReader, obscura_jax.cli.main, wraps stdout: its inner stream moves)."""
    holder = getattr(sys, name)
    stream = getattr(holder, "_stream", holder)
    stream.flush()
    copy = os.fdopen(os.dup(fd), "w", buffering=1, encoding=getattr(stream, "encoding", None) or "utf-8",
                     errors=getattr(stream, "errors", None) or "backslashreplace")
    if holder is stream:
        setattr(sys, name, copy)
    else:
        holder._stream = copy


# an absl / glog line of severity F (fatal): "F1205 19:36:34.562498  7348 client.h:80] ..."
_FATAL = re.compile(r"F\d{4} \d\d:\d\d:\d\d")


def fatal_line(path: str, limit: int = 256 * 1024) -> str:
    """The last fatal log line of a log (what XLA says as it aborts its process), ''
    when there is none or the log cannot be read."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - limit))
            lines = f.read().decode(errors="replace").splitlines()
    except OSError:
        return ""
    return next((line.strip() for line in reversed(lines) if _FATAL.match(line.strip())), "")
