"""A training run that stops at a step's end on SIGTERM, checkpointed.

Batch schedulers send SIGTERM some seconds before they kill a job. The step loop
(obscura_jax.run.trainer) asks SIGTERM to wait while a step runs
(interrupt.defer_sigterm): a step is never cut in half (its optimizer update
replaces each stage's params and optimizer state in donated buffers, so a state cut
there could not be saved). At each step's end every process shares, with the step's
losses, whether it got SIGTERM (`share_step_end`); if any did, every process stops
after that same step: the step is checkpointed where --checkpoint-dir is given (by
the trainer's own save, all processes together), every process waits for the others
to have saved (`stop_after`), and raises interrupt.Terminated naming who got it.
`--resume` continues from that step with the losses of a run that never stopped.

SIGTERM outside the steps (start-up, compiling, measuring costs, writing the
outputs) is raised at once, as Ctrl-C is: that part of the run has nothing to save.
"""
from __future__ import annotations

from obscura_jax.cli import interrupt
from obscura_jax.processes.process_group import ProcessGroup


def share_step_end(group: ProcessGroup, losses: list | None) -> tuple[list, tuple[int, ...]]:
    """Every process's view of the step's end: the last stage's losses (from the
    process that runs it) and the processes that got SIGTERM (empty: go on)."""
    parts = group.gather("loss", {"losses": losses, "sigterm": interrupt.sigterm_pending()})
    shared = next(p["losses"] for p in parts if p["losses"] is not None)
    return shared, tuple(rank for rank, p in enumerate(parts) if p["sigterm"])


def stop_after(step: int, who: tuple[int, ...], group: ProcessGroup) -> None:
    """The run stops after `step` (checkpointed already, where it saves checkpoints):
    once every process is here, raise Terminated naming `who`."""
    group.barrier(f"stopped after step {step} on SIGTERM")
    interrupt.terminate(who)
