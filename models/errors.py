"""The project's error family, in its lowest package and free of JAX so every
package (schedules included) can raise and catch it.

ObscuraError means bad user input: a name, a number, a file or a combination that
cannot work. The `obscura` CLI and the scripts print it as one line and exit 2.
Any other exception is a bug and is shown with its traceback. ObscuraError is a
ValueError, so code that catches ValueError keeps working.
"""
from __future__ import annotations


class ObscuraError(ValueError):
    """Bad user input, reported as one line naming the problem."""


class ModelConfigError(ObscuraError):
    """A model name, config field, op name, policy or unit range is not valid."""
