"""Bounds on a pipeline's size (pure Python), so a typo or a hostile file answers
at once instead of running for minutes and gigabytes: every (stage, micro-batch)
pair is a handful of actions that are generated, validated, simulated and drawn
one by one. The generators (`schedules.generators.generate`, which re-exports these
names) and the file loaders (`schedules.formats.io.load_schedule`, `schedules.formats.torch_csv`)
apply them before building anything."""
from __future__ import annotations

from schedules.errors import ScheduleError

MAX_STAGES = 1024
MAX_MICROBATCHES = 65536
MAX_PAIRS = 65536


def check_pipeline_size(num_stages, num_microbatches) -> None:
    """One line naming the bound a pipeline's stage or micro-batch count breaks
    (values that are not integers are left to the caller's own checks)."""
    for what, v, bound in (("stages", num_stages, MAX_STAGES), ("micro-batches", num_microbatches,
                                                                 MAX_MICROBATCHES)):
        if isinstance(v, int) and v > bound:
            raise ScheduleError(f"number of {what} must be <= {bound}, got {v} (a bound of this tool: "
                                "bigger pipelines take minutes and gigabytes to build and simulate)")
    if isinstance(num_stages, int) and isinstance(num_microbatches, int) \
            and num_stages * num_microbatches > MAX_PAIRS:
        raise ScheduleError(f"stages x micro-batches must be <= {MAX_PAIRS}, got {num_stages} x "
                            f"{num_microbatches} (a bound of this tool: every pair is generated, simulated "
                            "and drawn op by op)")


def check_index(what: str, value: int, where: str = "") -> None:
    """A stage, device or micro-batch index a file names, within the bounds (a stage
    or device below MAX_STAGES, a micro-batch below MAX_MICROBATCHES)."""
    bound = MAX_MICROBATCHES if what == "micro-batch" else MAX_STAGES
    if isinstance(value, int) and value >= bound:
        raise ScheduleError(f"{where}{what} index {value} is past this tool's bound (at most {bound} "
                            f"{what}{'es' if what == 'micro-batch' else 's'})")


MAX_ACTIONS = 8 * MAX_PAIRS     # F, B or I, W, SO, SI of every pair, with room to spare


def check_action_count(count: int, where: str = "") -> None:
    """A file's number of actions (cells), counted before any is parsed."""
    if count > MAX_ACTIONS:
        raise ScheduleError(f"{where}{count} actions; at most {MAX_ACTIONS} are read (a bound of this tool: "
                            f"at most {MAX_PAIRS} stage x micro-batch pairs)")
