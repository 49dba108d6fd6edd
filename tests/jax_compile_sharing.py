"""The suite's compiled programs shared across emulated CPU devices.

JAX's persistent compilation cache keys a program by its computation AND the devices
it was compiled for, except on GPUs, where it leaves the device assignment out of the
key (jax._src.cache_key: "invariant between processes") and loads a cached program
for the devices asked for. On the suite's 8 emulated CPU devices the same stage
program (a middle stage of llama2-tiny, a reference step) is compiled once per
device it lands on. `share_across_devices` keys CPU programs as JAX keys GPU ones,
so a program compiled for cpu:1 serves cpu:2 (BENCHMARKS.md "Test suite time"). The
program is the same XLA computation; it runs on the devices the caller placed it on
(tests/tooling/test_compile_sharing.py holds both).

Only the suite does this, in pytest's own processes (tests/conftest.py: its xdist
workers run most of the suite's compiles, the command matrices' among them); a
process a test starts keys its programs as JAX does. It reaches into a private JAX
function, so it applies only where that function has the parameter it sets, and
does nothing otherwise (the suite is then slower, not wrong)."""
from __future__ import annotations

import inspect


def share_across_devices() -> bool:
    """Key compiled programs without their device assignment; whether it applied."""
    try:
        from jax._src import cache_key
        hash_options = cache_key._hash_serialized_compile_options
        if "strip_device_assignment" not in inspect.signature(hash_options).parameters:
            return False
    except (ImportError, AttributeError, TypeError, ValueError):
        return False
    if getattr(hash_options, "shares_across_devices", False):
        return True

    def without_devices(hash_obj, compile_options, strip_device_assignment=False):
        return hash_options(hash_obj, compile_options, strip_device_assignment=True)
    without_devices.shares_across_devices = True
    cache_key._hash_serialized_compile_options = without_devices
    return True
