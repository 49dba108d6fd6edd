"""Host swapping of residuals behind one small interface (SO / SI actions).

SO moves a fraction beta of one micro-batch's residual bytes to host memory: whole
leaves, largest first, until at least beta of the bytes are chosen. SI brings them
back to the stage's device before its backward.

Mechanism (measured on an H200; BENCHMARKS.md): a plain `jax.device_put` between
memory kinds (`device` <-> `pinned_host`) runs on its own copy stream and hid
85-94% of its time under compute, while a jitted identity copy with host
out_shardings hid only ~25%. Both are here so benchmarks can measure the choice
again ("device_put" is the default); everything else in the engine only calls
`swap_out` / `swap_in`.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, replace

import jax

from obscura_jax.runtime.stage_program import Residuals

MECHANISMS = ("device_put", "jit")
HOST_KIND = "pinned_host"


def choose_leaves(sizes: tuple[int, ...], fraction: float) -> tuple[int, ...]:
    """Indices of whole leaves, largest first, until >= fraction of the bytes (a leaf
    of 0 bytes, e.g. one already on host (Residuals.device_sizes), never)."""
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"swap fraction must be in [0, 1], got {fraction}")
    total = sum(sizes)
    if fraction == 0.0 or total == 0:
        return ()
    target = fraction * total
    chosen, acc = [], 0
    for i in sorted(range(len(sizes)), key=lambda i: (-sizes[i], i)):
        if acc >= target or sizes[i] == 0:
            break
        chosen.append(i)
        acc += sizes[i]
    return tuple(sorted(chosen))


def host_memory_supported(device: jax.Device) -> bool:
    try:
        return any(m.kind == HOST_KIND for m in device.addressable_memories())
    except Exception:  # backends without memory kinds
        return False


@dataclass
class SwapCounters:
    bytes_out: int = 0
    bytes_in: int = 0
    transfers_out: int = 0
    transfers_in: int = 0


class HostSwap:
    """Moves residual leaves between a device and its pinned host memory."""

    def __init__(self, mechanism: str = "device_put"):
        if mechanism not in MECHANISMS:
            raise ValueError(f"unknown swap mechanism {mechanism!r} (choose from {', '.join(MECHANISMS)})")
        self.mechanism = mechanism
        self.counters = SwapCounters()
        self._jit_copies: dict = {}
        self._lock = threading.Lock()     # stage workers of several devices share one HostSwap

    def _put(self, leaves: list, sharding) -> list:
        if self.mechanism == "device_put":
            return jax.device_put(leaves, sharding)
        key = (tuple(sharding), tuple((x.shape, x.dtype) for x in leaves))
        with self._lock:
            fn = self._jit_copies.get(key)
            if fn is None:
                fn = jax.jit(lambda xs: xs, out_shardings=sharding)
                self._jit_copies[key] = fn
        return fn(leaves)

    def swap_out(self, residuals: Residuals, fraction: float, device: jax.Device) -> Residuals:
        """Send >= fraction of the micro-batch's residual bytes to host (async)."""
        if residuals.host_slots:
            raise ValueError("swap out of residuals that are already (partly) on host")
        slots = choose_leaves(residuals.device_sizes, fraction)   # offloaded leaves are on host already
        if not slots:
            return residuals
        chosen = [residuals.leaves[i] for i in slots]
        # each leaf keeps its sharding (a stage mesh's shards go to their own hosts)
        moved = self._put(chosen, [x.sharding.with_memory_kind(HOST_KIND) for x in chosen])
        leaves = list(residuals.leaves)
        for i, x in zip(slots, moved):
            leaves[i] = x
        out = replace(residuals, leaves=tuple(leaves), host_slots=slots)
        with self._lock:
            self.counters.bytes_out += out.host_bytes
            self.counters.transfers_out += 1
        return out

    def swap_in(self, residuals: Residuals, device: jax.Device) -> Residuals:
        """Bring the swapped leaves back to the device (async)."""
        if not residuals.host_slots:
            return residuals
        chosen = [residuals.leaves[i] for i in residuals.host_slots]
        moved = self._put(chosen, [x.sharding.with_memory_kind("device") for x in chosen])
        leaves = list(residuals.leaves)
        for i, x in zip(residuals.host_slots, moved):
            leaves[i] = x
        with self._lock:
            self.counters.bytes_in += residuals.host_bytes
            self.counters.transfers_in += 1
        return replace(residuals, leaves=tuple(leaves), host_slots=())
