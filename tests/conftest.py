"""Emulate 8 CPU devices before any test imports JAX, with one compilation cache for
the run; the hypothesis profiles (quick by default); tests under tests/gpu/ are marked
gpu (`make test-gpu` runs `pytest -m gpu`), and gpu tests skip without a GPU."""
import os
from pathlib import Path

# The suite compiles far more than it runs, so its compiles are made cheap (the same
# math, pipelined and reference alike): LLVM's backend optimisation at level 0, and
# XLA CPU's older loop emitters instead of its MLIR fusion emitters (half the compile
# CPU time of a stage program: 46.6 -> 22.1 s for a cold 1f1b + zb-h1 `obscura train`
# on llama2-tiny, 2-core box). Every process a test starts inherits the variable.
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8 --xla_backend_optimization_level=0 "
                                   "--xla_cpu_use_fusion_emitters=false")
os.environ.setdefault("JAX_ENABLE_X64", "0")


def _share_compiled_programs() -> None:
    """One persistent JAX compilation cache for the whole run (every xdist worker and
    every process a test spawns inherit the variable): the suite compiles the same
    tiny stage programs in many tests and subprocesses, and compiling is most of its
    CPU time. A fresh directory per run (removed at the end); a cache the caller
    set is used as is."""
    if "JAX_COMPILATION_CACHE_DIR" in os.environ:
        return
    import tempfile
    os.environ["JAX_COMPILATION_CACHE_DIR"] = tempfile.mkdtemp(prefix="obscura-test-jax-cache-")
    os.environ["OBSCURA_TEST_OWN_JAX_CACHE"] = "1"
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")


_share_compiled_programs()

import pytest  # noqa: E402
from hypothesis import HealthCheck, settings  # noqa: E402

# Hypothesis profiles: "quick" for make test (the default), "thorough" for make
# test-long (HYPOTHESIS_PROFILE=thorough, or pytest's --hypothesis-profile thorough).
# A test's own max_examples is its quick count; tests/budget.py's examples(n) scales
# it by the loaded profile (x10 in thorough). No deadline: a busy machine is not a bug.
settings.register_profile("quick", max_examples=100, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("thorough", max_examples=1000, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "quick"))


def pytest_unconfigure(config):
    """The controller (not an xdist worker) removes the cache it made."""
    if os.environ.get("OBSCURA_TEST_OWN_JAX_CACHE") and "PYTEST_XDIST_WORKER" not in os.environ:
        import shutil
        shutil.rmtree(os.environ["JAX_COMPILATION_CACHE_DIR"], ignore_errors=True)


def _has_gpu() -> bool:
    try:
        import jax
        return any(d.platform == "gpu" for d in jax.devices())
    except Exception:
        return False


GPU_TESTS = Path(__file__).resolve().parent / "gpu"    # the GPU tier: every test there is marked gpu


@pytest.hookimpl(tryfirst=True)   # before `-m gpu` selects: it sees the marks added here
def pytest_collection_modifyitems(config, items):
    for item in items:
        if GPU_TESTS in Path(item.path).resolve().parents:
            item.add_marker(pytest.mark.gpu)
    gpu_items = [i for i in items if i.get_closest_marker("gpu")]
    if gpu_items and not _has_gpu():
        skip = pytest.mark.skip(reason="needs a CUDA GPU")
        for item in gpu_items:
            item.add_marker(skip)


@pytest.fixture
def model_registry():
    """Restore the model registry (families and configs) after a test that registers;
    user modules it loaded are forgotten, so the next load registers them again."""
    import sys

    from models import config, registry

    families, configs = dict(registry._FAMILIES), dict(config.CONFIGS)
    yield registry
    for name in [n for n in sys.modules if n.startswith("obscura_user_")]:
        del sys.modules[name]
    registry._FAMILIES.clear()
    registry._FAMILIES.update(families)
    config.CONFIGS.clear()
    config.CONFIGS.update(configs)
