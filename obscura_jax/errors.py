"""Errors of the runtime and the command line: the project's ObscuraError family
(models.errors), so the CLI prints them as one line with exit code 2."""
from __future__ import annotations

from models.errors import ObscuraError


class UsageError(ObscuraError):
    """A command-line flag, or a combination of flags, that cannot work."""


class RunError(ObscuraError):
    """A run's configuration, data, devices, schedule or checkpoint cannot work."""


def error_line(err: BaseException) -> str:
    """One line for a user error: its message's first line; a file problem names the file."""
    if isinstance(err, OSError) and err.filename is not None:
        return f"{err.filename}: {err.strerror or err}"
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__
