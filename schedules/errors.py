"""Errors raised for bad user input. The CLI turns any ValueError into one line."""


class ScheduleError(ValueError):
    """A schedule, its parameters or its file is not valid."""
