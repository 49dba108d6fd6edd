"""Choosing devices before JAX starts: emulated CPU devices need XLA_FLAGS set
before the first `import jax`."""
from __future__ import annotations

import os
import re
import sys

from obscura_jax.errors import UsageError

_FLAG = "--xla_force_host_platform_device_count"


def request_host_devices(count: int) -> bool:
    """Ask XLA for at least `count` emulated CPU devices (no effect on GPUs). Must run
    before JAX initialises; if JAX already has a backend, the existing count is kept
    and this returns False."""
    if count < 1:
        raise ValueError(f"device count must be >= 1, got {count}")
    flags = os.environ.get("XLA_FLAGS", "")
    m = re.search(rf"{_FLAG}=(\d+)", flags)
    if m and int(m.group(1)) >= count:
        count = int(m.group(1))
    else:
        flags = re.sub(rf"{_FLAG}=\d+", "", flags).strip()
        os.environ["XLA_FLAGS"] = f"{flags} {_FLAG}={count}".strip()
    if "jax" in sys.modules:
        try:
            import jax  # lazy: only when JAX is already loaded; importing it here would start it
            jax.config.update("jax_num_cpu_devices", count)
        except Exception:  # backend already up: keep what exists
            return False
    return True


def cpu_devices(count: int) -> None:
    """Emulate `count` CPU devices (at least): call it first, before any JAX
    computation (importing JAX is fine). If JAX has already started with fewer CPU
    devices, that cannot change any more: one ObscuraError says so."""
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise UsageError(f"cpu_devices needs a device count >= 1, got {count!r}")
    if request_host_devices(count):
        return
    import jax  # lazy: already loaded (request_host_devices found it started)
    have = len(jax.devices("cpu"))
    if have < count:
        raise UsageError(f"JAX already started with {have} CPU device(s), {count} asked: call "
                         "obscura_jax.cpu_devices(n) before any JAX computation (or start Python with "
                         f"XLA_FLAGS={_FLAG}={count})")


def parse_devices(spec: str | None, needed: int) -> tuple[str, int]:
    """'cpu:N' | 'gpu' | None -> (platform, count). None picks GPU when present,
    else emulated CPU devices, one per stage."""
    if spec is None:
        request_host_devices(max(needed, 1))
        return "auto", needed
    m = re.fullmatch(r"cpu:([0-9]+)", spec)     # ASCII digits (\d takes any script's)
    if m:
        n = int(m.group(1))
        if n < 1:
            raise UsageError(f"--devices cpu:N needs N >= 1, got {spec}")
        request_host_devices(n)
        return "cpu", n
    if spec == "gpu":
        return "gpu", 0
    raise UsageError(f"--devices must be cpu:N or gpu, got {spec!r}")
