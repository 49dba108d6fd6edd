"""Choosing devices before JAX starts: emulated CPU devices need XLA_FLAGS set
before the first `import jax`."""
from __future__ import annotations

import os
import re
import sys

_FLAG = "--xla_force_host_platform_device_count"


def request_host_devices(count: int) -> None:
    """Ask XLA for `count` emulated CPU devices (no effect on GPUs). Must run before
    JAX initialises; if JAX already has a backend, the existing count is kept."""
    if count < 1:
        raise ValueError(f"device count must be >= 1, got {count}")
    flags = os.environ.get("XLA_FLAGS", "")
    m = re.search(rf"{_FLAG}=(\d+)", flags)
    if m and int(m.group(1)) >= count:
        return
    flags = re.sub(rf"{_FLAG}=\d+", "", flags).strip()
    os.environ["XLA_FLAGS"] = f"{flags} {_FLAG}={count}".strip()
    if "jax" in sys.modules:
        try:
            import jax
            jax.config.update("jax_num_cpu_devices", count)
        except Exception:  # backend already up: keep what exists
            pass


def parse_devices(spec: str | None, needed: int) -> tuple[str, int]:
    """'cpu:N' | 'gpu' | None -> (platform, count). None picks GPU when present,
    else emulated CPU devices, one per stage."""
    if spec is None:
        request_host_devices(max(needed, 1))
        return "auto", needed
    m = re.fullmatch(r"cpu:(\d+)", spec)
    if m:
        n = int(m.group(1))
        if n < 1:
            raise ValueError(f"--devices cpu:N needs N >= 1, got {spec}")
        request_host_devices(n)
        return "cpu", n
    if spec == "gpu":
        return "gpu", 0
    raise ValueError(f"--devices must be cpu:N or gpu, got {spec!r}")
