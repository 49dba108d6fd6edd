"""Pipeline schedules: IR, generators, validator, simulator, drawing, file formats.

Pure Python + numpy: this package never imports JAX.
"""
from schedules.costs import StageCosts
from schedules.errors import ScheduleError
from schedules.ir import Action, Kind, Schedule, StageSpec

__all__ = ["Action", "Kind", "Schedule", "StageSpec", "StageCosts", "ScheduleError"]
