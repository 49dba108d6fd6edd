"""Small file helpers shared by every package (pure Python, no JAX): JSON in and
out, replacing a file atomically (the one helper every JSON, text, PNG and SVG
output goes through), and checking an output path before any work is done.

Inputs are read within bounds, each breach one ObscuraError line naming the file:
only a regular file is opened (a FIFO would block for ever, /dev/zero never end),
at most MAX_READ_BYTES of it; JSON nested more than MAX_JSON_DEPTH deep (a scan
before parsing: Python's parser would raise RecursionError) or holding an integer
of over MAX_INT_DIGITS digits is refused. `read_json` is the one bounded JSON
reader: every file loader and the command line's checks of their inputs
(obscura_jax/cli/files.py) go through it.
An existing target that is not a regular file (a FIFO, a device node such as
/dev/null) is never replaced: writing renames a finished file over the target; a
symlink whose target does not exist is never written through (that would create
a file wherever it points, the filesystem root included)."""
from __future__ import annotations

import json
import math
import os
import stat
import tempfile
from pathlib import Path
from typing import Any, Callable, TypeVar

from models.errors import ObscuraError

T = TypeVar("T")

MAX_READ_BYTES = 256 * 2 ** 20
MAX_INT_DIGITS = 1000
MAX_JSON_DEPTH = 500         # well inside what Python's parser recurses to (about 1000 levels)
_KINDS = ((stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a FIFO"),
          (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a directory"))


def file_kind(path: str | os.PathLike) -> str | None:
    """What `path` is when it exists and is not a regular file (through symlinks),
    e.g. "a FIFO"; None for a regular file or nothing there (or no permission to look)."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return None
    if stat.S_ISREG(mode):
        return None
    return next((what for test, what in _KINDS if test(mode)), "not a regular file")


def read_text(path: str | os.PathLike, what: str, error: type[ObscuraError] = ObscuraError) -> str:
    """A regular file's UTF-8 text, at most MAX_READ_BYTES; every failure one `error`
    line naming `what` and the file. Nothing else is opened (a FIFO would block)."""
    path = Path(path)
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise error(f"{what} not found: {path}") from None
    except (OSError, ValueError) as e:
        raise error(f"cannot read {what} {path}: {getattr(e, 'strerror', None) or e}") from None
    kind = file_kind(path)
    if kind is not None:
        raise error(f"{what} {path}: is {kind}, not a regular file")
    if info.st_size > MAX_READ_BYTES:
        raise error(f"{what} {path}: {info.st_size} bytes; at most {MAX_READ_BYTES} (256 MiB) are read")
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_READ_BYTES + 1)
    except OSError as e:
        raise error(f"cannot read {what} {path}: {e.strerror}") from None
    if len(data) > MAX_READ_BYTES:       # grew since the stat
        raise error(f"{what} {path}: over {MAX_READ_BYTES} bytes; at most {MAX_READ_BYTES} (256 MiB) are read")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise error(f"{what} {path} is not UTF-8 text (byte 0x{e.object[e.start]:02x} "
                    f"at offset {e.start})") from None


def _check_replaceable(target: Path, shown, flag: str = "") -> None:
    kind = file_kind(target)
    if kind is not None and kind != "a directory":
        raise ObscuraError(f"{flag}{' ' if flag else ''}{shown}: is {kind}, not a regular file: "
                           "refusing to replace it")


def _clean(obj: Any) -> Any:
    """Make numpy scalars/arrays and non-finite floats JSON-safe."""
    if isinstance(obj, dict):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    if hasattr(obj, "tolist"):  # numpy scalar or array
        return _clean(obj.tolist())
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def _target(path: str | os.PathLike, flag: str = "") -> Path:
    """Where writing `path` lands: through a symlink to the file it points at. A
    symlink to nothing is refused (one ObscuraError line)."""
    path = Path(path)
    if not path.is_symlink():
        return path
    target = Path(os.path.realpath(path))
    if not target.exists():
        raise ObscuraError(f"{flag}{' ' if flag else ''}{path}: is a symlink to {os.readlink(path)}, which does "
                           "not exist: refusing to write through it")
    return target


def check_writable(path: str | os.PathLike | None, flag: str, shown=None) -> None:
    """Raise one ObscuraError line (naming `flag` and the user's path) unless a file
    can be written at `path`: not a directory, and its folder (or the nearest folder
    that exists, where the rest would be created) takes a new file. Probes by
    creating and removing an empty file, so it holds for root and odd file systems
    (/proc) alike. None: nothing to check. `shown`: the path to name instead (e.g.
    the directory a file goes in)."""
    if path is None:
        return
    shown = path if shown is None else shown
    if str(path).strip() == "":
        raise ObscuraError(f"{flag} is empty: give a file path")
    target = _target(path, flag)
    if target.is_dir():
        raise ObscuraError(f"{flag} {shown}: is a directory, expected a file path")
    _check_replaceable(target, shown, flag)
    check_writable_folder(target.parent, f"{flag} {shown}")


def check_writable_folder(path: str | os.PathLike, label: str, error: type[ObscuraError] = ObscuraError,
                          missing: str = "cannot write there") -> None:
    """The nearest existing folder at or above `path` takes a new file (one probe file,
    made and removed), or `error` in one line starting with `label`."""
    folder = Path(os.path.abspath(path))
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        raise error(f"{label}: {missing}: {folder} is not a directory")
    try:
        fd, probe = tempfile.mkstemp(prefix=".obscura-probe-", dir=folder)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise error(f"{label}: cannot write there: {e.strerror or e}") from None


def replace_atomically(path: str | os.PathLike, write: Callable[[str], None]) -> Path:
    """write(temporary name) beside `path`, then rename it over `path`, so a crash
    never leaves a half-written file where a good one was; permissions as a plain
    open() would give under the umask (mkstemp makes files private); a symlink is
    written through (its target replaced, the link kept). A failure names `path`,
    never the temporary file. An existing target that is not a regular file (a
    FIFO, a device node) is refused with one ObscuraError line, never replaced."""
    path = Path(path)
    target = _target(path)
    _check_replaceable(target, path)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=target.suffix, dir=target.parent)
    except OSError as e:
        raise OSError(e.errno, e.strerror, str(path)) from None
    os.close(fd)
    try:
        write(tmp)
        mask = os.umask(0)
        os.umask(mask)
        os.chmod(tmp, 0o666 & ~mask)
        os.replace(tmp, target)
    except OSError as e:
        Path(tmp).unlink(missing_ok=True)
        raise OSError(e.errno, e.strerror, str(path)) from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_text_atomic(path: str | os.PathLike, text: str) -> Path:
    """Write text atomically (replace_atomically)."""
    def write(tmp: str) -> None:
        with open(tmp, "w") as f:
            f.write(text)
    return replace_atomically(path, write)


def write_json_atomic(path: str | os.PathLike, data: Any) -> None:
    """Write JSON atomically (replace_atomically)."""
    def write(tmp: str) -> None:
        with open(tmp, "w") as f:
            json.dump(_clean(data), f, indent=1)
            f.write("\n")
    replace_atomically(path, write)


def json_depth(text: str) -> int:
    """Deepest [ / { nesting outside strings (a scan, no recursion)."""
    depth = best = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            best = max(best, depth)
        elif ch in "]}":
            depth -= 1
    return best


def read_json(path: str | os.PathLike, what: str = "JSON file") -> Any:
    """Read JSON (read_text's bounds, then nesting and integer size), turning every
    failure into one ObscuraError line that names the file."""
    path = Path(path)
    text = read_text(path, what)
    depth = json_depth(text)
    if depth > MAX_JSON_DEPTH:
        raise ObscuraError(f"{what} {path}: JSON nested {depth} deep; at most {MAX_JSON_DEPTH} levels are read")

    def bounded_int(digits: str) -> int:
        n = len(digits.lstrip("-"))
        if n > MAX_INT_DIGITS:
            raise ObscuraError(f"{what} {path}: JSON holds an integer of {n} digits; at most "
                               f"{MAX_INT_DIGITS} are read")
        return int(digits)
    try:
        return json.loads(text, parse_int=bounded_int)
    except ObscuraError:
        raise
    except json.JSONDecodeError as e:
        raise ObscuraError(f"malformed {what} {path}: {e.msg} at line {e.lineno} column {e.colno}") from None
    except RecursionError:
        raise ObscuraError(f"{what} {path}: JSON nested too deep (deeper than Python's parser goes, "
                           "about 1000 levels)") from None
    except ValueError as e:           # Python's own integer-digit limit, should parse_int miss one
        raise ObscuraError(f"malformed {what} {path}: {str(e).splitlines()[0] if str(e) else 'bad value'}") from None


def load_document(path: str | os.PathLike, what: str, parse: Callable[[Any], T]) -> T:
    """read_json, then parse(data); a parse error (an ObscuraError) gets the file's
    name in front, keeping its class."""
    data = read_json(path, what)
    try:
        return parse(data)
    except ObscuraError as e:
        raise type(e)(f"{what} {path}: {e}") from None
