"""One micro-batch's residuals on a stage, and which memory each leaf lives in.

A stage program's forward returns its residuals as flat leaves (stage_program).
Most live in device memory; a policy's offload set (models.RecomputePolicy.offload,
lowered to `save_and_offload_only_these_names`) makes the compiled forward return
those leaves in host memory, where they stay until the backward reads them; SO
moves others to host and SI back (swap). Every byte count of the engine (the
memory ledger, the measured costs, the run's summary) tells the two apart by the
memory kind JAX reports for each leaf: `pinned_host` and `unpinned_host` are host,
anything else (`device`) device memory. On CPU devices JAX keeps the kinds apart
too (a CPU device has device, pinned_host and unpinned_host memories, all in the
machine's RAM), so the split is the same on CPU and GPU; only on a GPU is it a
split between two memories.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Residuals:
    """One micro-batch's activation memory on a stage: a flat tuple of arrays.
    The first slots may be the stage's own input / targets buffers (not copies).
    `host_slots` are the leaves currently swapped out to host memory (SO);
    `offloaded` the leaves the program itself placed in host memory (a policy's
    offload set: their sharding's memory kind is a host one), which stay there."""
    leaves: tuple
    sizes: tuple[int, ...]          # bytes per leaf (static per stage)
    host_slots: tuple[int, ...] = ()
    offloaded: tuple[int, ...] = ()

    @property
    def nbytes(self) -> int:
        return sum(self.sizes)

    @property
    def host_bytes(self) -> int:
        """Swapped out (SO)."""
        return sum(self.sizes[i] for i in self.host_slots)

    @property
    def offloaded_bytes(self) -> int:
        return sum(self.sizes[i] for i in self.offloaded)

    @property
    def host_resident_bytes(self) -> int:
        """Every byte in host memory now: offloaded by the program or swapped out."""
        return self.host_bytes + self.offloaded_bytes

    @property
    def device_bytes(self) -> int:
        return self.nbytes - self.host_resident_bytes

    @property
    def device_sizes(self) -> tuple[int, ...]:
        """Bytes per leaf in device memory when not swapped (0 for an offloaded leaf):
        what a swap may choose from."""
        return device_sizes(self.sizes, self.offloaded)


HOST_MEMORY_KINDS = ("pinned_host", "unpinned_host")


def memory_kind(spec, device) -> str:
    """The memory kind a compiled program's output lives in, as JAX reports it (a
    sharding without one is in the device's default memory)."""
    kind = getattr(spec.sharding, "memory_kind", None)
    if kind is not None:
        return kind
    try:
        return device.default_memory().kind
    except Exception:  # a backend without memory kinds: all of it is the device's
        return "device"


def host_slots(kinds) -> tuple[int, ...]:
    """Leaves in a host memory kind."""
    return tuple(i for i, k in enumerate(kinds) if k in HOST_MEMORY_KINDS)


def device_sizes(sizes, offloaded) -> tuple[int, ...]:
    """`sizes` with the offloaded leaves' set to 0."""
    return tuple(0 if i in offloaded else n for i, n in enumerate(sizes))
