"""What one stage-to-stage transfer costs, in one process and across two
(scripts/bench/bench_transfer.py is the entry point), measured with the runtime's own
transports (Transport.time_boundary):

    in-process      jax.device_put between two devices of one process, one way
                    (the median of blocking copies)
    cross-process   JAX's cross-process jax.device_put between two processes'
                    devices (CPU: the socket path), one way = half the median
                    ping-pong round trip, after the transfers are warmed up

Sizes: a small message (latency) and a 64 MiB one (bandwidth).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from obscura_jax.profiling.stopwatch import median_time

SIZES = {"1 KiB": 256, "64 MiB": 16 * 2**20}        # float32 elements


def _specs(elements: int):
    return [jax.ShapeDtypeStruct((elements,), jnp.float32)]


def time_sizes(make_transport, devices, reps: int) -> dict[str, float | None]:
    """One-way seconds per size between stage 0 (devices[0]) and stage 1 (devices[1]);
    `make_transport(devices, specs, nbytes)` builds the transport. Every process of a
    multi-process run calls it; None where this process does not time the transfer."""
    out = {}
    for label, n in SIZES.items():
        transport = make_transport(devices, _specs(n), [4 * n])
        transport.warm_up()
        like = None
        if transport.is_local(0):
            like = jax.device_put(jax.random.normal(jax.random.key(0), (n,), jnp.float32), devices[0])
        out[label] = transport.time_boundary(0, 1, like, reps, lambda fn, k: median_time(fn, k, warmup=2))
    return out


def report(results: dict[str, dict[str, float | None]]) -> list[str]:
    """Lines for people: microseconds, and GB/s for the 64 MiB message."""
    lines = []
    for mode, times in results.items():
        parts = []
        for label, seconds in times.items():
            if seconds is None:
                continue
            text = f"{label} {seconds * 1e6:,.0f} us"
            if label == "64 MiB":
                text += f" = {4 * SIZES[label] / seconds / 1e9:.2f} GB/s"
            parts.append(text)
        lines.append(f"{mode:14s} one way: " + ", ".join(parts))
    return lines
