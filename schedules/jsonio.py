"""Small JSON helpers shared by every package (pure Python, no JAX)."""
from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any


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


def write_json_atomic(path: str | os.PathLike, data: Any) -> None:
    """Write JSON so a crash never leaves a half-written file where a good one was."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(_clean(data), f, indent=1)
            f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def read_json(path: str | os.PathLike, what: str = "JSON file") -> Any:
    """Read JSON, turning every failure into one ValueError line that names the file."""
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise ValueError(f"{what} not found: {path}") from None
    except OSError as e:
        raise ValueError(f"cannot read {what} {path}: {e.strerror}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"malformed {what} {path}: {e.msg} at line {e.lineno} column {e.colno}") from None
