"""The environment a command runs in, checked before any work: a bad value is one
line naming the variable (exit 2), not a traceback deep in a child process, in
JAX's import or in XLA's flag parser (docs/multiprocess.md, "Environment").

The variables the project reads (obscura_jax.processes.launch), each with the range
that works (RANGES, documented in docs/multiprocess.md):

    OBSCURA_COORDINATOR, OBSCURA_TRANSFER_ADDRESS   HOST:PORT, port 1..65535
    OBSCURA_NUM_PROCESSES       1..MAX_STAGES (every process runs a stage)
    OBSCURA_PROCESS_ID          0..OBSCURA_NUM_PROCESSES - 1
    OBSCURA_LOCAL_DEVICE_IDS    distinct device indices 0..MAX_LOCAL_DEVICES - 1
    OBSCURA_HEARTBEAT_SECONDS, OBSCURA_STEP_STALL_SECONDS
                                MIN_SECONDS..MAX_SECONDS: the watchdog looks once a
                                period (1 s), so a limit under three periods names live
                                processes lost or stuck; past a day nothing is watched
    OBSCURA_CONNECT_SECONDS     the same range: how long a process waits to join

JAX's own variables, for the commands that start JAX (all but simulate):
JAX_ENABLE_X64 must be a truth value; any other JAX_* value JAX refuses on import
(JAX_DEFAULT_MATMUL_PRECISION, JAX_TRACEBACK_FILTERING, ...) is named;
JAX_DISABLE_JIT is refused for the commands that run programs (the engine and
the profiler compile every stage program with jax.jit: op by op nothing they
measure is real, and a step takes minutes); JAX_NUMPY_RANK_PROMOTION=raise is
refused (the models broadcast a norm's scale over the activations, implicit rank
promotion JAX would raise on). A non-default XLA_FLAGS (anything but the emulated
CPU device count) or JAX_PLATFORMS (anything but cpu) is tried once in a
subprocess that starts JAX's backend (`probe_jax`, bounded by PROBE_SECONDS): XLA
parses its flags there and ends the process on a bad one, and a platform that
cannot start here fails there, so the command says it in one line instead.
Once JAX started under a set of values, the command records it (PROBED: the
digest of the interpreter and of the variables JAX, XLA and the GPU stack read) in
its own environment, so a later command of the same process and the processes it
starts skip the probe while those values stay the same.
OBSCURA_DEBUG takes any value. An empty variable counts as unset, as the readers do.
"""
from __future__ import annotations

import hashlib
import inspect
import math
import os
import re
import subprocess
import sys

from obscura_jax.errors import UsageError
from obscura_jax.processes.watchdog import Watchdog
from schedules.bounds import MAX_STAGES

ADDRESS = re.compile(r"\[?[\w.:-]+\]?:([0-9]+)", re.ASCII)
JAX_BOOLS = ("y", "yes", "t", "true", "on", "1", "n", "no", "f", "false", "off", "0")
JAX_TRUE = ("y", "yes", "t", "true", "on", "1")
WATCHDOG_PERIOD = inspect.signature(Watchdog).parameters["period"].default
MIN_SECONDS = 3 * WATCHDOG_PERIOD
MAX_SECONDS = 86400
MAX_LOCAL_DEVICES = 1024
JAX_COMMANDS = ("model_info", "profile", "plan", "train", "compare", "sweep")
JIT_COMMANDS = ("profile", "train", "compare")
OWN_XLA_FLAG = re.compile(r"--xla_force_host_platform_device_count=[0-9]+")
PROBE_SECONDS = 300
_PROBE = ("import jax\ntry:\n    jax.devices()\nexcept Exception as e:\n"
          "    print('obscura-probe:', type(e).__name__ + (': ' + str(e).splitlines()[0] if str(e) else ''))\n"
          "    raise SystemExit(3)\n")
PROBED = "OBSCURA_JAX_STARTED"     # the probe's key (_probe_key) JAX last started under
PROBE_PREFIXES = ("XLA_", "JAX_", "CUDA_", "NVIDIA_", "TF_", "TPU_", "ROCR_", "HIP_")


def _int_in(text: str, low: int, high: int) -> bool:
    return re.fullmatch(r"[0-9]+", text.strip(), re.ASCII) is not None and low <= int(text) <= high


def _address(text: str) -> bool:
    m = ADDRESS.fullmatch(text.strip())
    return m is not None and 1 <= int(m.group(1)) <= 65535


def _seconds(text: str) -> bool:
    if not re.fullmatch(r"\s*[0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?\s*", text, re.ASCII):
        return False
    return math.isfinite(float(text)) and MIN_SECONDS <= float(text) <= MAX_SECONDS


def _device_ids(text: str) -> bool:
    ids = text.split(",")
    return all(_int_in(t, 0, MAX_LOCAL_DEVICES - 1) for t in ids) and len({int(t) for t in ids}) == len(ids)


RANGES = {
    "OBSCURA_COORDINATOR": (_address, "HOST:PORT with a port in 1..65535"),
    "OBSCURA_NUM_PROCESSES": (lambda v: _int_in(v, 1, MAX_STAGES),
                              f"an integer in 1..{MAX_STAGES} (every process runs at least one stage)"),
    "OBSCURA_PROCESS_ID": (lambda v: _int_in(v, 0, MAX_STAGES - 1), f"an integer in 0..{MAX_STAGES - 1}"),
    "OBSCURA_TRANSFER_ADDRESS": (_address, "IP:PORT with a port in 1..65535"),
    "OBSCURA_LOCAL_DEVICE_IDS": (_device_ids, f"distinct comma-separated device indices in 0..{MAX_LOCAL_DEVICES - 1}, "
                                              "e.g. 0,1"),
    "OBSCURA_HEARTBEAT_SECONDS": (_seconds, f"a number of seconds in [{MIN_SECONDS:g}, {MAX_SECONDS}] (the watchdog "
                                            f"looks every {WATCHDOG_PERIOD:g} s)"),
    "OBSCURA_STEP_STALL_SECONDS": (_seconds, f"a number of seconds in [{MIN_SECONDS:g}, {MAX_SECONDS}] (the watchdog "
                                             f"looks every {WATCHDOG_PERIOD:g} s)"),
    "OBSCURA_CONNECT_SECONDS": (_seconds, f"a number of seconds in [{MIN_SECONDS:g}, {MAX_SECONDS}] (how long a "
                                          "process waits to join the run)"),
    "JAX_ENABLE_X64": (lambda v: v.strip().lower() in JAX_BOOLS, "true or false (or 1 / 0)"),
}
CHECKS = RANGES      # the name other modules used


def check_environment(environ=os.environ) -> None:
    """One line naming the first variable with a value its reader would not take."""
    for name, (ok, what) in RANGES.items():
        value = environ.get(name)
        if value and not ok(value):
            raise UsageError(f"environment variable {name} must be {what}, got {value[:80]!r}")
    num, pid = environ.get("OBSCURA_NUM_PROCESSES"), environ.get("OBSCURA_PROCESS_ID")
    if num and pid and int(pid) >= int(num):
        raise UsageError(f"environment variable OBSCURA_PROCESS_ID must be in 0..{int(num) - 1} for "
                         f"OBSCURA_NUM_PROCESSES={num}, got {pid!r}")


def check_jax_environment(command: str, environ=os.environ) -> None:
    """For a command that starts JAX: JAX's and XLA's variables (module docstring)."""
    if command not in JAX_COMMANDS:
        return
    if command in JIT_COMMANDS and environ.get("JAX_DISABLE_JIT", "").strip().lower() in JAX_TRUE:
        raise UsageError(f"environment variable JAX_DISABLE_JIT={environ['JAX_DISABLE_JIT']!r}: obscura "
                         f"{command.replace('_', '-')} compiles every stage program with jax.jit (op by op "
                         "nothing it measures is real); unset it")
    if environ.get("JAX_NUMPY_RANK_PROMOTION", "").strip().lower() == "raise":
        raise UsageError("environment variable JAX_NUMPY_RANK_PROMOTION='raise': the models broadcast a norm's "
                         "scale over the activations (implicit rank promotion); set it to allow or warn")
    if any(k.startswith("JAX_") and v for k, v in environ.items()) and "jax" not in sys.modules:
        _import_jax()
    if _non_default(environ):
        key = _probe_key(environ)
        if environ.get(PROBED) == key:
            return
        line = probe_jax(environ)
        if line is not None:
            raise UsageError(line)
        if environ is os.environ:
            os.environ[PROBED] = key


def _probe_key(environ) -> str:
    """What the probe's verdict depends on: the interpreter, and the values of the
    variables JAX, XLA and the GPU stack read (LD_LIBRARY_PATH too), as a short digest.
    The emulated CPU device count is left out of XLA_FLAGS, as _non_default leaves it:
    the launcher takes it off its children's flags, and they need no probe of their own."""
    read = sorted((k, OWN_XLA_FLAG.sub("", v).strip() if k == "XLA_FLAGS" else v) for k, v in environ.items()
                  if k.startswith(PROBE_PREFIXES) or k == "LD_LIBRARY_PATH")
    return hashlib.sha256(repr((sys.executable, read)).encode()).hexdigest()[:16]


def _import_jax() -> None:
    """Import JAX now, so a JAX_* value it refuses is named (it raises ValueError)."""
    try:
        import jax  # lazy: only where a JAX_* variable is set; JAX reads them on import  # noqa: F401
    except ValueError as e:
        text = str(e).splitlines()[0] if str(e) else ""
        m = re.search(r'Invalid value "(.*)" for JAX flag (\w+)', text) or \
            re.search(r"invalid truth value '(.*)' for environment '(\w+)'", text)
        if m is None:
            raise
        name = m.group(2).upper()
        raise UsageError(f"environment variable {name}: JAX does not take {m.group(1)[:80]!r} ({text})") from None


def _non_default(environ) -> bool:
    """XLA_FLAGS beyond the emulated CPU device count, or JAX_PLATFORMS other than cpu."""
    flags = OWN_XLA_FLAG.sub("", environ.get("XLA_FLAGS", "")).strip()
    platforms = environ.get("JAX_PLATFORMS", "").strip().lower()
    return bool(flags) or platforms not in ("", "cpu")


def probe_jax(environ=os.environ) -> str | None:
    """Start JAX's backend in a subprocess under `environ`: None when it starts (or
    cannot be judged in PROBE_SECONDS), else one line naming the variable."""
    env = dict(environ, XLA_PYTHON_CLIENT_PREALLOCATE="false")   # the probe holds no GPU memory
    try:
        done = subprocess.run([sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True,
                              timeout=PROBE_SECONDS)
    except (subprocess.TimeoutExpired, OSError):
        return None
    if done.returncode == 0:
        return None
    lines = (done.stdout + "\n" + done.stderr).splitlines()
    xla = next((re.sub(r"^[EF]\d{4} [0-9:.]+\s+\d+ \S+\] ", "", ln) for ln in lines
                if re.match(r"^[EF]\d{4} ", ln)), None)
    if xla is not None and "XLA_FLAGS" in environ:
        return f"environment variable XLA_FLAGS: {xla.strip()[:300]}"
    said = next((ln[len("obscura-probe:"):].strip() for ln in lines if ln.startswith("obscura-probe:")), None)
    if said is not None and environ.get("JAX_PLATFORMS"):
        return (f"environment variable JAX_PLATFORMS={environ['JAX_PLATFORMS']!r}: JAX cannot start it on this "
                f"machine ({said[:200]}); unset it, or set it to a platform this machine has (e.g. cpu)")
    last = next((ln for ln in reversed(lines) if ln.strip()), f"exit status {done.returncode}")
    return f"JAX does not start under XLA_FLAGS / JAX_PLATFORMS as set: {last.strip()[:300]}"
