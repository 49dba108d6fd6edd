"""Errors raised for bad user input (the project's ObscuraError family: the CLI
turns them into one line and exit code 2)."""
from models.errors import ObscuraError


class ScheduleError(ObscuraError):
    """A schedule, its parameters or its file is not valid."""
