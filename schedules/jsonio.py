"""Small file helpers shared by every package (pure Python, no JAX): JSON in and
out, replacing a file atomically (the one helper every JSON, text, PNG and SVG
output goes through), and checking an output path before any work is done."""
from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any, Callable, TypeVar

from models.errors import ObscuraError

T = TypeVar("T")


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


def _target(path: str | os.PathLike) -> Path:
    """Where writing `path` lands: through a symlink to the file it points at."""
    path = Path(path)
    return Path(os.path.realpath(path)) if path.is_symlink() else path


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
    target = _target(path)
    if target.is_dir():
        raise ObscuraError(f"{flag} {shown}: is a directory, expected a file path")
    folder = target.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        raise ObscuraError(f"{flag} {shown}: cannot write there: {folder} is not a directory")
    try:
        fd, probe = tempfile.mkstemp(prefix=".obscura-probe-", dir=folder)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise ObscuraError(f"{flag} {shown}: cannot write there: {e.strerror or e}") from None


def replace_atomically(path: str | os.PathLike, write: Callable[[str], None]) -> Path:
    """write(temporary name) beside `path`, then rename it over `path`, so a crash
    never leaves a half-written file where a good one was; permissions as a plain
    open() would give under the umask (mkstemp makes files private); a symlink is
    written through (its target replaced, the link kept). A failure names `path`,
    never the temporary file."""
    path = Path(path)
    target = _target(path)
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


def read_json(path: str | os.PathLike, what: str = "JSON file") -> Any:
    """Read JSON, turning every failure into one ObscuraError line that names the file."""
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise ObscuraError(f"{what} not found: {path}") from None
    except OSError as e:
        raise ObscuraError(f"cannot read {what} {path}: {e.strerror}") from None
    except UnicodeDecodeError as e:
        raise ObscuraError(f"{what} {path} is not UTF-8 text (byte 0x{e.object[e.start]:02x} "
                           f"at offset {e.start})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise ObscuraError(f"malformed {what} {path}: {e.msg} at line {e.lineno} column {e.colno}") from None


def load_document(path: str | os.PathLike, what: str, parse: Callable[[Any], T]) -> T:
    """read_json, then parse(data); a parse error (an ObscuraError) gets the file's
    name in front, keeping its class."""
    data = read_json(path, what)
    try:
        return parse(data)
    except ObscuraError as e:
        raise type(e)(f"{what} {path}: {e}") from None
