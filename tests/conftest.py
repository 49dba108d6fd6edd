"""Emulate 8 CPU devices before any test imports JAX, with one compilation cache for
the run; the hypothesis profiles (quick by default); tests under tests/gpu/ are marked
gpu (`make test-gpu` runs `pytest -m gpu`), and gpu tests skip without a GPU."""
import os
import subprocess
import sys
from pathlib import Path

# The suite compiles far more than it runs, so its compiles are made cheap (the same
# math, pipelined and reference alike): LLVM's backend optimisation at level 0; XLA
# CPU's older loop emitters instead of its MLIR fusion emitters (half the compile CPU
# time of a stage program: 46.6 -> 22.1 s for a cold 1f1b + zb-h1 `obscura train` on
# llama2-tiny, a 2-core CPU machine); and each program's LLVM module compiled whole, not split
# into pieces for a thread pool (the pieces' overhead outweighs them on these tiny
# programs: test_numerics_llama 26.7 -> 22.3 CPU-s cold; the code is the same).
# Every process a test starts inherits the variable.
BASE_FLAGS = "--xla_force_host_platform_device_count=8 --xla_backend_optimization_level=0"
OPTIONAL_FLAGS = ("--xla_cpu_use_fusion_emitters=false", "--xla_cpu_parallel_codegen_split_count=1")


def _xla_knows(flags: str) -> bool:
    """Whether this XLA starts with `flags` (it aborts the process on a flag it does
    not know: jax 0.11's XLA has no loop-emitter flag), asked of a child process."""
    try:
        probe = subprocess.run([sys.executable, "-c", "import jax; jax.devices('cpu')"], capture_output=True,
                               env=dict(os.environ, XLA_FLAGS=flags, JAX_PLATFORMS="cpu"), timeout=300)
    except subprocess.TimeoutExpired:
        return False
    return probe.returncode == 0


def _suite_xla_flags() -> str:
    """The suite's XLA_FLAGS: BASE_FLAGS and each of OPTIONAL_FLAGS this XLA knows
    (all asked at once, one at a time only if that fails), by the process that sets
    the variable."""
    known = list(OPTIONAL_FLAGS) if _xla_knows(" ".join(OPTIONAL_FLAGS)) else [
        f for f in OPTIONAL_FLAGS if _xla_knows(f)]
    return " ".join([BASE_FLAGS, *known])


if "XLA_FLAGS" not in os.environ:
    os.environ["XLA_FLAGS"] = _suite_xla_flags()
os.environ.setdefault("JAX_ENABLE_X64", "0")
# numpy's OpenBLAS starts a thread per core at import, in every process the suite
# starts (~0.1 CPU-s each); the suite's numpy arrays are tiny.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


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

from obscura_jax.cli import environment, gc_policy  # noqa: E402
# Each pytest process traces and compiles like an `obscura` command, and the
# collector's default thresholds cost it ~7% of its CPU (obscura_jax.cli.gc_policy).
gc_policy.for_batch_process()


def _probe_jax_once() -> None:
    """Under the suite's XLA_FLAGS every `obscura` command would first start JAX in a
    probe process of its own (obscura_jax.cli.environment); the controller checks once,
    and the workers and every process they start inherit the record."""
    if "PYTEST_XDIST_WORKER" not in os.environ:
        environment.check_jax_environment("plan")


_probe_jax_once()

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


# How `make test` spreads the suite over its 3 workers (`-n 3 --dist loadfile
# --no-loadscope-reorder`): a unit of work is one test module (its module fixtures,
# compiled programs and JAX flags stay in one process), and the modules are handed out
# heaviest first, by WEIGHTS (wall seconds of one worker, from scripts/bench/suite_cpu.py's
# run of the whole suite on a 2-core CPU machine, 2026-12-04; BENCHMARKS.md "Test suite time"): a
# heavy module dealt last is the run's tail. Without --no-loadscope-reorder xdist deals
# the modules by their number of tests instead (the one-test examples and the command
# matrix last), whatever order this hook gives (tests/tooling/test_suite_order.py). Only an
# order: no verdict depends on it; a module not listed weighs 0 and keeps its
# collection order after the listed ones. (Not --dist loadgroup: with pytest 9.2,
# xdist 3.8's loadgroup no longer groups (it renames item._nodeid, which nodeid no
# longer reads).)
WEIGHTS = {
    "tests/obscura_jax/test_command_matrix_llama.py": 72,
    "tests/obscura_jax/processes/test_cross_process.py": 70,
    "tests/obscura_jax/test_command_matrix_gpt.py": 69,
    "tests/obscura_jax/processes/test_watchdog.py": 68,
    "tests/obscura_jax/runtime/test_stage_mesh.py": 58,
    "tests/obscura_jax/processes/test_faults.py": 52,
    "tests/obscura_jax/runtime/test_stage_mesh_processes.py": 44,
    "tests/planner/test_mesh_plan_measured.py": 33,
    "tests/obscura_jax/test_numerics_llama.py": 29,
    "tests/obscura_jax/test_numerics_gpt.py": 29,
    "tests/obscura_jax/checkpoints/test_directory.py": 27,
    "tests/tooling/test_paper_figures.py": 27,
    "tests/obscura_jax/cli/commands/test_train.py": 27,
    "tests/obscura_jax/cli/commands/test_train_offload.py": 25,     # estimated (alone: 48 s wall, 19 CPU-s)
    "tests/examples/test_parallel_block.py": 27,
    "tests/obscura_jax/profiling/test_profiler.py": 26,
    "tests/obscura_jax/cli/test_sigterm.py": 26,
    "tests/obscura_jax/cli/commands/test_compare.py": 25,
    "tests/obscura_jax/cli/test_interrupt.py": 23,
    "tests/examples/test_custom_model.py": 21,
    "tests/schedules/test_properties.py": 18,
    "tests/examples/test_moe.py": 17,
    "tests/obscura_jax/cli/commands/test_compare_sigint.py": 16,
    "tests/models/test_policy_grads.py": 16,
    "tests/obscura_jax/processes/test_launch.py": 15,
    "tests/docs/test_docs.py": 14,
    "tests/examples/test_profile_plan_train.py": 14,
    "tests/obscura_jax/runtime/test_backward_split.py": 13,
    "tests/tooling/test_bench_multi_gpu.py": 13,
    "tests/obscura_jax/run/test_plan_run.py": 13,
    "tests/schedules/generators/test_obscura_goldens.py": 12,   # one worker, 2026-12-05
    "tests/obscura_jax/test_api_offload.py": 12,                    # estimated (alone: 24 s wall, 10 CPU-s)
    "tests/obscura_jax/run/test_reference.py": 10,
    "tests/examples/test_custom_schedule.py": 10,
    "tests/examples/test_policy_experiment.py": 9,
    "tests/examples/test_custom_model_cli.py": 9,
    "tests/planner/layouts/test_sweep.py": 9,
    "tests/planner/test_families.py": 8,
    "tests/obscura_jax/run/test_trainer.py": 7,
    "tests/models/test_registry.py": 6,
    "tests/planner/layouts/test_measured.py": 6,
    "tests/obscura_jax/cli/commands/test_plan.py": 6,
    "tests/models/test_info.py": 6,
    "tests/schedules/test_grid.py": 6,
    "tests/models/test_aux_loss.py": 5,
}
ROOT = Path(__file__).resolve().parent.parent


def _heaviest_first(items) -> None:
    """Reorder the items so that heavier modules come first (a module's items stay
    together, in collection order)."""
    first, weight = {}, {}
    for i, item in enumerate(items):
        path = Path(item.path).resolve()
        module = path.relative_to(ROOT).as_posix() if ROOT in path.parents else str(path)
        first.setdefault(item.path, i)
        weight[item.path] = WEIGHTS.get(module, 0)
    items.sort(key=lambda it: (-weight[it.path], first[it.path]))


@pytest.hookimpl(tryfirst=True)   # before `-m gpu` selects: it sees the marks added here
def pytest_collection_modifyitems(config, items):
    if hasattr(config, "workerinput"):      # an xdist worker: the controller deals in this order
        _heaviest_first(items)
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
