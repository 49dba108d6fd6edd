"""Errors the planner raises for bad input: the project's ObscuraError family, so
the CLI turns them into one line and exit code 2."""
from __future__ import annotations

from models.errors import ObscuraError


class ProfileError(ObscuraError):
    """A profile (obscura-profile/1) is malformed or inconsistent."""


class PlanError(ObscuraError):
    """A plan cannot be made, or a plan file (obscura-plan/1) is not valid."""


class InfeasibleError(PlanError):
    """No configuration fits the memory limit; carries the smallest limit that does."""

    def __init__(self, message: str, smallest_feasible_limit: float | None = None):
        super().__init__(message)
        self.smallest_feasible_limit = smallest_feasible_limit
