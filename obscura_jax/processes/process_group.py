"""A run's processes as the trainer sees them: which stages are this process's,
how to agree with the others, and how to reach their stages.

`ProcessGroup` is the single process (rank 0 of 1: every stage is local, every
collective is the identity). `obscura_jax.processes.distributed.DistributedGroup` is the same
interface over `jax.distributed`'s coordination service, for several processes on
one or several hosts. The trainer calls the collectives in the same order on every
process, so each one's name is drawn from a counter that stays aligned.
"""
from __future__ import annotations

from obscura_jax.runtime.transport import Transport


class ProcessGroup:
    """One process runs every stage."""
    rank = 0
    size = 1
    clock_offset = 0.0           # seconds to add to this process's perf_counter to get process 0's
    clock_offset_error = 0.0     # its bound: half the round trip it was measured over

    @property
    def is_leader(self) -> bool:
        """The process that writes the run's outputs (JSON, charts, report)."""
        return self.rank == 0

    def owns(self, device) -> bool:
        return True

    def transport(self, stage_devices, boundary_specs, boundary_bytes, shardings=None) -> Transport:
        return Transport(stage_devices, boundary_bytes, shardings)

    # ---- collectives (JSON-able values) ------------------------------------------
    def gather(self, name: str, value) -> list:
        """Every process's `value`, by rank."""
        return [value]

    def agree(self, name: str, digest: str, summary: str) -> None:
        """Check that every process holds the same `digest` (else a one-line error)."""

    def barrier(self, name: str) -> None:
        """Wait until every process gets here."""

    def gather_bytes(self, name: str, data: bytes) -> list[bytes] | None:
        """Every process's `data` on the leader (None elsewhere)."""
        return [data]

    # ---- the run's life ----------------------------------------------------------
    def progress(self, what: str, step_seconds: float | None = None) -> None:
        """This process finished `what` (the watchdog's view of progress): a step that
        took `step_seconds`, or a phase of set-up, measuring or checkpointing."""

    def finish(self) -> None:
        """A clean end."""

    def fail(self, error: BaseException) -> None:
        """An error stops the run: return to let the caller report it."""


SINGLE = ProcessGroup()
