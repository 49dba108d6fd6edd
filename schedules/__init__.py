"""Pipeline schedules: IR, generators, validator, simulator, drawing, file formats.

Pure Python + numpy: this package never imports JAX (matplotlib only inside
`schedules.formats.gantt`, imported lazily).

    from schedules import generate, simulate, StageCosts
    sched = generate("obscura", 4, 8, adjusted=1)
    tl = simulate(sched, StageCosts.uniform(4, fwd=1, bwd=2, recompute=1))
    tl.makespan, tl.stages[0].backward_bubble
"""
from schedules.formats import io
from schedules.costs import StageCosts
from schedules.errors import ScheduleError
from schedules.generators import SCHEDULES, generate
from schedules.ir import Action, Kind, Schedule, StageSpec
from schedules.ordering import issue_order
from schedules.simulator import simulate
from schedules.timeline import OpRecord, StageStats, Timeline
from schedules.validator import validate

__all__ = ["Action", "Kind", "Schedule", "StageSpec", "StageCosts", "ScheduleError", "SCHEDULES",
           "generate", "validate", "simulate", "issue_order", "Timeline", "OpRecord", "StageStats", "io"]
