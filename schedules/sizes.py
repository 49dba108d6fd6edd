"""Byte sizes and durations for people and from people, and the other values people type:
the one parser of integers, numbers, sizes and comma lists, shared by every package
(pure Python).

    parse_bytes("80GiB") == 85899345920.0     parse_bytes("85.9GB") == 85.9e9
    format_bytes(80 * GiB) == "80.0 GiB"      format_bytes(512) == "512 B"
    parse_int("12") == 12                     parse_real("1e-3") == 0.001
    split_items("a, b", "--policy") == ("a", "b")
    format_seconds(0.0838) == "83.8 ms"       format_seconds(2.2e-5) == "22 us"

Units: decimal kB/MB/GB/TB, binary KiB/MiB/GiB/TiB, or none (bytes), any case.
Digits are ASCII only: Python's int() and float() also read other scripts' digits
("٣" is 3 to them), which a command line must not take for a number; an integer
has at most MAX_DIGITS digits (int() refuses past 4300 with an error of its own).
"""
from __future__ import annotations

import math
import re

from models.errors import ObscuraError

GiB = 2 ** 30
MAX_SIZE = 2 ** 60     # 1 EiB: larger sizes are unit mistakes (and overflow integer byte counts)
_UNITS = {"": 1, "b": 1, "kb": 10 ** 3, "mb": 10 ** 6, "gb": 10 ** 9, "tb": 10 ** 12,
          "kib": 2 ** 10, "mib": 2 ** 20, "gib": 2 ** 30, "tib": 2 ** 40}
_SIZE_RE = re.compile(r"^\s*([+-]?[0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)\s*$")
_INT_RE = re.compile(r"\s*[+-]?[0-9]+\s*")
_REAL_RE = re.compile(r"\s*[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?\s*|\s*[+-]?(?:inf|infinity|nan)\s*",
                      re.IGNORECASE)
MAX_DIGITS = 1000
_BINARY = (("TiB", 2 ** 40), ("GiB", 2 ** 30), ("MiB", 2 ** 20), ("KiB", 2 ** 10))


def parse_int(text, what: str = "value", error: type[ObscuraError] = ObscuraError) -> int:
    """'12', ' -3 ' -> int: ASCII digits only, at most MAX_DIGITS of them; anything
    else raises `error` with one line naming `what`."""
    if isinstance(text, int) and not isinstance(text, bool):
        return text
    if not isinstance(text, str) or not _INT_RE.fullmatch(text):
        raise error(f"{what} must be an integer (ASCII digits), got {str(text)[:40]!r}")
    if len(text.strip().lstrip("+-")) > MAX_DIGITS:
        raise error(f"{what} is an integer of {len(text.strip().lstrip('+-'))} digits; at most {MAX_DIGITS}")
    return int(text)


def parse_real(text, what: str = "value", error: type[ObscuraError] = ObscuraError) -> float:
    """'1e-3', '.5', 'inf' -> float: ASCII digits only (float() reads other scripts'
    too); anything else raises `error` naming `what`. Range checks are the caller's."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        return float(text)
    if not isinstance(text, str) or len(text) > MAX_DIGITS or not _REAL_RE.fullmatch(text):
        raise error(f"{what} must be a number (ASCII digits), got {str(text)[:40]!r}")
    return float(text)


def split_items(text: str, what: str, error: type[ObscuraError] = ObscuraError) -> tuple[str, ...]:
    """'a,b' -> ('a', 'b'), each item stripped; an empty list or an empty item
    ('', 'a,', 'a,,b') raises `error` naming `what`: a stray comma is a typo, never
    "nothing"."""
    items = tuple(t.strip() for t in str(text).split(","))
    if not any(items):
        raise error(f"{what} is empty: give one or more comma-separated items")
    if not all(items):
        raise error(f"{what} {text!r} has an empty item: remove the stray comma")
    return items


def parse_bytes(text, what: str = "memory size", *, allow_zero: bool = False,
                error: type[ObscuraError] = ObscuraError) -> float:
    """'80GiB', '85.9GB', '141e9' or a number -> bytes. Bad input raises `error`
    (an ObscuraError) with one line naming `what`."""
    if isinstance(text, bool):
        raise error(f"{what} must be a size, got {text!r}")
    if isinstance(text, (int, float)):
        value = float(text)
    else:
        m = _SIZE_RE.match(str(text))
        unit = m.group(2).lower() if m else None
        if not m or unit not in _UNITS:
            raise error(f"cannot read a {what} from {text!r}: it is not a size "
                        f"(give bytes, or e.g. 80GiB, 85.9GB, 141e9)")
        value = float(m.group(1)) * _UNITS[unit]
    if not math.isfinite(value) or value > MAX_SIZE:
        raise error(f"{what} must be a finite size of at most 1 EiB (no device holds more), got {text!r}")
    if value < 0 or (value == 0 and not allow_zero):
        raise error(f"{what} must be {'>=' if allow_zero else '>'} 0 bytes, got {text!r}")
    return value


def format_bytes(n, decimals: int = 1) -> str:
    """'80.0 GiB'-style text (binary units, `decimals` places); '-' for None."""
    if n is None:
        return "-"
    n = float(n)
    for unit, size in _BINARY:
        if abs(n) >= size:
            return f"{n / size:.{decimals}f} {unit}"
    return f"{n:.0f} B"


def format_seconds(t) -> str:
    """Seconds in the unit that shows them: '1.426 s', '83.8 ms', '22 us'; '-' for None."""
    if t is None:
        return "-"
    if abs(t) >= 1:
        return f"{t:.3f} s"
    if abs(t) >= 1e-3:
        return f"{t * 1e3:.1f} ms"
    return f"{t * 1e6:.0f} us"
