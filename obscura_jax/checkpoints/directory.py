"""What a checkpoint directory holds besides Orbax's step directories: the lock of
the run using it, and the per-step metrics log.

    <dir>/.obscura.lock   {"pid", "host", "started"} of the run holding the directory
    <dir>/metrics.jsonl   one JSON line per step: {"step", "loss", "seconds"}

The lock is an advisory `flock` on the lock file, held for the whole run: a second
run on the directory stops at once with one line naming the holder. The run removes
the file when it ends, whatever the outcome (an error, Ctrl-C, SIGTERM): it unlinks
it while still holding the lock, and a run that takes the lock checks that the file
it locked is still the one at the path (else it opens the new one), so removing
never lets two runs hold the directory. The kernel drops a flock when its process
dies, so a killed run never blocks the next one; the holder's record it leaves
behind is taken over with one warning line.

The metrics log is appended (and flushed) after every step by the process that
writes the run's outputs. A resumed run first cuts the log back to the checkpoint's
step (the steps after it are run again), so across any number of kills and resumes
the log holds every step's loss exactly once, in order.
"""
from __future__ import annotations

import datetime
import fcntl
import json
import os
import socket
import sys
from pathlib import Path

from obscura_jax.errors import RunError
from schedules.formats.jsonio import write_text_atomic

LOCK_NAME = ".obscura.lock"
METRICS_NAME = "metrics.jsonl"
# Where a step's metadata (step, identity) lies: the `meta` item of the Orbax step
# directory (checkpoints/pipeline.py and packed.py save it with JsonSave).
STEP_META = Path("meta") / "metadata"


def saved_process_count(directory: str | Path) -> int | None:
    """The process count the newest step of a checkpoint dir records, read as plain
    JSON before any process starts: a resume with another count then stops before
    every process has started JAX. None where no step's metadata reads (the run's own
    check, through Orbax, decides then)."""
    steps = [p for p in Path(directory).glob("*") if p.name.isdigit() and p.is_dir()]
    for step in sorted(steps, key=lambda p: int(p.name), reverse=True):
        try:
            identity = json.loads((step / STEP_META).read_text())["identity"]
        except (OSError, ValueError, KeyError, TypeError):
            return None
        count = identity.get("processes", 1) if isinstance(identity, dict) else None
        return count if isinstance(count, int) else None
    return None


def warn(text: str) -> None:
    """One warning line on stderr."""
    print(f"obscura: warning: {text}", file=sys.stderr, flush=True)


def _holder_text(record: dict) -> str:
    return (f"pid {record.get('pid', '?')} on {record.get('host', '?')} "
            f"(started {record.get('started', '?')})")


def _read_record(fd: int) -> dict | None:
    os.lseek(fd, 0, os.SEEK_SET)
    raw = os.read(fd, 4096)
    try:
        return json.loads(raw) if raw.strip() else None
    except ValueError:
        return {"pid": "?", "host": "?", "started": "unreadable lock record"}


def beside_lock(directory: str | Path) -> Path:
    """The lock file of a directory that is replaced whole (compare --out): beside it,
    `.obscura.lock-<name>`, so the rename that publishes the directory keeps it. The
    run removes it when it ends (DirectoryLock.release)."""
    d = Path(directory).absolute()
    return d.parent / f".obscura.lock-{d.name}"


class DirectoryLock:
    """An exclusive lock on a directory for this process (release() or process exit
    ends it): a checkpoint directory's `<dir>/.obscura.lock`, or `lock_path` (e.g.
    beside_lock for compare --out); `what` names the directory in the error line."""

    def __init__(self, directory: str | Path, lock_path: Path | None = None, what: str = "checkpoint dir"):
        self.directory = Path(directory)
        self.path = Path(lock_path) if lock_path is not None else self.directory / LOCK_NAME
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = None
        while self._fd is None:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                record = _read_record(fd) or {}
                os.close(fd)
                raise RunError(f"{what} {directory} is in use by another run: {_holder_text(record)} "
                               f"holds {self.path}; wait for it to end or choose another dir") from None
            if _still_at(fd, self.path):
                self._fd = fd
            else:       # its holder removed it between our open and our lock: take the new one
                os.close(fd)
        old = _read_record(self._fd)
        if old is not None:
            here = old.get("host") == socket.gethostname()
            why = "no longer running" if here and not _alive(old.get("pid")) else "its lock no longer held"
            warn(f"taking over the lock of {directory} left by {_holder_text(old)}: {why}")
        record = {"pid": os.getpid(), "host": socket.gethostname(),
                  "started": datetime.datetime.now().astimezone().isoformat(timespec="seconds")}
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, json.dumps(record).encode(), 0)

    def release(self) -> None:
        """Remove the lock file, then let go of the lock (removed first, so a run that
        locks the file meanwhile sees it is gone and takes a new one)."""
        if self._fd is None:
            return
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
        fcntl.flock(self._fd, fcntl.LOCK_UN)
        os.close(self._fd)
        self._fd = None


def check_unlocked(directory: str | Path, lock_path: Path | None = None, what: str = "checkpoint dir") -> None:
    """Fail at once (before JAX starts) if another run holds `directory`'s lock;
    the run takes the lock itself later (DirectoryLock)."""
    path = Path(lock_path) if lock_path is not None else Path(directory) / LOCK_NAME
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:       # no run holds it (a run that ends removes it)
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            record = _read_record(fd) or {}
            raise RunError(f"{what} {directory} is in use by another run: {_holder_text(record)} "
                           f"holds {path}; wait for it to end or choose another dir") from None
        fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _still_at(fd: int, path: Path) -> bool:
    """Whether the open file `fd` is still the file at `path` (not removed or replaced)."""
    try:
        here = os.stat(path)
    except FileNotFoundError:
        return False
    mine = os.fstat(fd)
    return (mine.st_dev, mine.st_ino) == (here.st_dev, here.st_ino)


def _alive(pid) -> bool:
    if not isinstance(pid, int):
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class MetricsLog:
    """metrics.jsonl of one run: `start(step)` cuts it back to `step` (0: empties
    it) and returns what it kept, `append(...)` adds a step."""

    def __init__(self, directory: str | Path):
        self.path = Path(directory) / METRICS_NAME
        self._file = None

    def entries(self) -> list[dict]:
        """The log's steps in order, each once (a torn last line is dropped)."""
        if not self.path.exists():
            return []
        out, seen = [], set()
        for line in self.path.read_text(errors="replace").splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if isinstance(entry, dict) and isinstance(entry.get("step"), int) and entry["step"] not in seen:
                seen.add(entry["step"])
                out.append(entry)
        return out

    def start(self, step: int) -> list[dict]:
        """Cut the log back to `step` and open it for appending; the steps kept (a
        resumed run's curve before the resume)."""
        kept = [e for e in self.entries() if e["step"] <= step]
        write_text_atomic(self.path, "".join(json.dumps(e) + "\n" for e in kept))
        self._file = open(self.path, "a")
        return kept

    def append(self, step: int, loss: float, seconds: float) -> None:
        self._file.write(json.dumps({"step": step, "loss": loss, "seconds": seconds}) + "\n")
        self._file.flush()
        os.fsync(self._file.fileno())

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
