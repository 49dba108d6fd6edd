"""Errors of the runtime and the command line: the project's ObscuraError family
(models.errors), so the CLI prints them as one line with exit code 2."""
from __future__ import annotations

from models.errors import ObscuraError


class UsageError(ObscuraError):
    """A command-line flag, or a combination of flags, that cannot work."""


class RunError(ObscuraError):
    """A run's configuration, data, devices, schedule or checkpoint cannot work."""
