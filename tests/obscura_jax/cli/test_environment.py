"""The environment variables the project reads (obscura_jax.cli.environment): a value
its reader would not take is one line naming the variable, exit 2, before any work;
valid and empty values pass."""
import os
import subprocess
import sys

import pytest

from obscura_jax.cli.main import main
from obscura_jax.cli.environment import check_environment
from obscura_jax.errors import UsageError

GOOD = {"OBSCURA_COORDINATOR": "10.0.0.1:1234", "OBSCURA_NUM_PROCESSES": "4", "OBSCURA_PROCESS_ID": "0",
        "OBSCURA_TRANSFER_ADDRESS": "[::1]:5555", "OBSCURA_LOCAL_DEVICE_IDS": "0,1",
        "OBSCURA_HEARTBEAT_SECONDS": "3", "OBSCURA_STEP_STALL_SECONDS": "30",
        "JAX_ENABLE_X64": "True", "OBSCURA_DEBUG": "anything"}
BAD = [("OBSCURA_STEP_STALL_SECONDS", "abc"), ("OBSCURA_STEP_STALL_SECONDS", "nan"),
       ("OBSCURA_HEARTBEAT_SECONDS", "-1"), ("OBSCURA_HEARTBEAT_SECONDS", "0"),
       ("OBSCURA_HEARTBEAT_SECONDS", "1e300"), ("OBSCURA_LOCAL_DEVICE_IDS", "a,b"),
       ("OBSCURA_LOCAL_DEVICE_IDS", "0,-1"), ("OBSCURA_NUM_PROCESSES", "0"), ("OBSCURA_PROCESS_ID", "x"),
       ("OBSCURA_COORDINATOR", "nohost"), ("OBSCURA_TRANSFER_ADDRESS", "1.2.3.4"),
       ("JAX_ENABLE_X64", "maybe")]


def test_valid_and_empty_values_pass():
    check_environment(GOOD)
    check_environment({k: "" for k in GOOD})
    check_environment({})


@pytest.mark.parametrize("name, value", BAD, ids=[f"{n}={v}" for n, v in BAD])
def test_a_bad_value_names_the_variable(name, value):
    with pytest.raises(UsageError, match=f"environment variable {name} must be .*got {value!r}"):
        check_environment({**GOOD, name: value})


@pytest.mark.parametrize("name, value", [("JAX_ENABLE_X64", "maybe"), ("OBSCURA_LOCAL_DEVICE_IDS", "a,b"),
                                         ("OBSCURA_STEP_STALL_SECONDS", "abc")])
def test_every_command_answers_in_one_line_before_work(name, value, capsys, monkeypatch, tmp_path):
    from tests.obscura_jax.cli.commands import badinput
    monkeypatch.setenv(name, value)
    for argv in (["simulate", "--schedule", "1f1b", "--stages", "2", "--microbatches", "2", "--json", "s.json"],
                 ["train", "--steps", "1", "--json", "t.json"]):
        badinput.check(capsys, tmp_path, monkeypatch, argv, f"environment variable {name}")


RANGES = [("OBSCURA_HEARTBEAT_SECONDS", "0.001"), ("OBSCURA_HEARTBEAT_SECONDS", "2.9"),
          ("OBSCURA_HEARTBEAT_SECONDS", "86401"), ("OBSCURA_STEP_STALL_SECONDS", "1"),
          ("OBSCURA_STEP_STALL_SECONDS", "٥"), ("OBSCURA_NUM_PROCESSES", "2000"), ("OBSCURA_NUM_PROCESSES", "٢"),
          ("OBSCURA_PROCESS_ID", "1024"), ("OBSCURA_LOCAL_DEVICE_IDS", "0,0"), ("OBSCURA_LOCAL_DEVICE_IDS", "0,"),
          ("OBSCURA_COORDINATOR", "host:0"), ("OBSCURA_COORDINATOR", "host:70000"),
          ("OBSCURA_TRANSFER_ADDRESS", "10.0.0.1:٥٥٥٥")]


@pytest.mark.parametrize("name, value", RANGES, ids=[f"{n}={v}" for n, v in RANGES])
def test_each_variable_is_bounded_to_what_works(name, value):
    """OBSCURA_HEARTBEAT_SECONDS=0.001 passed once and every process died of SIGABRT
    (JAX's own heartbeat was then 0 s): each variable has the range docs/multiprocess.md lists."""
    with pytest.raises(UsageError, match=f"environment variable {name} must be .*got {value!r}"):
        check_environment({name: value})


def test_a_process_id_is_below_the_process_count():
    check_environment({"OBSCURA_NUM_PROCESSES": "2", "OBSCURA_PROCESS_ID": "1"})
    with pytest.raises(UsageError, match="OBSCURA_PROCESS_ID must be in 0..1 for OBSCURA_NUM_PROCESSES=2, got '2'"):
        check_environment({"OBSCURA_NUM_PROCESSES": "2", "OBSCURA_PROCESS_ID": "2"})


def test_jax_variables_that_cannot_work_are_refused_for_the_commands_that_start_jax():
    from obscura_jax.cli.environment import check_jax_environment
    for command in ("train", "compare", "profile"):
        with pytest.raises(UsageError,
                           match="JAX_DISABLE_JIT='1': obscura .* compiles every stage program with jax.jit"):
            check_jax_environment(command, {"JAX_DISABLE_JIT": "1"})
    check_jax_environment("model_info", {"JAX_DISABLE_JIT": "1"})       # traces only: jit or not
    check_jax_environment("simulate", {"JAX_DISABLE_JIT": "1", "XLA_FLAGS": "--nonsense"})   # never starts JAX
    with pytest.raises(UsageError, match="JAX_NUMPY_RANK_PROMOTION='raise': the models broadcast"):
        check_jax_environment("plan", {"JAX_NUMPY_RANK_PROMOTION": "raise"})
    check_jax_environment("train", {"XLA_FLAGS": "--xla_force_host_platform_device_count=4", "JAX_PLATFORMS": "cpu"})


def test_xla_flags_and_platforms_are_tried_once_in_a_subprocess():
    """XLA aborts with its whole flag help on a flag it cannot parse, and only where a
    command starts a backend: the probe starts one and names the flag."""
    from obscura_jax.cli.environment import probe_jax
    line = probe_jax({**os.environ, "XLA_FLAGS": "--xla_cpu_enable_fast_math=maybe"})
    assert line == "environment variable XLA_FLAGS: Couldn't interpret value maybe for flag xla_cpu_enable_fast_math."
    line = probe_jax({**os.environ, "JAX_PLATFORMS": "nosuchplatform"})
    assert line.startswith("environment variable JAX_PLATFORMS='nosuchplatform': JAX cannot start it on this "
                           "machine (RuntimeError: Unable to initialize backend 'nosuchplatform'"), line


def test_the_probe_runs_once_per_set_of_values(monkeypatch):
    """A command records the values JAX started under; the same values skip the probe
    (in this process and the processes it starts, which inherit the record), other
    values of a variable JAX or XLA reads are tried again, and a failed probe records
    nothing."""
    from obscura_jax.cli import environment
    calls = []
    verdict = {"--xla_a=1": None, "--xla_b=1": None, "--xla_bad=1": "environment variable XLA_FLAGS: bad"}
    monkeypatch.setattr(environment, "probe_jax",
                        lambda env: calls.append(env["XLA_FLAGS"]) or verdict[env["XLA_FLAGS"]])
    monkeypatch.delenv(environment.PROBED, raising=False)
    monkeypatch.setenv("XLA_FLAGS", "--xla_a=1")
    environment.check_jax_environment("train")
    environment.check_jax_environment("plan")
    assert calls == ["--xla_a=1"] and os.environ[environment.PROBED]
    child = dict(os.environ)                                   # what a process it starts inherits
    environment.check_jax_environment("train", child)
    launched = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=2 --xla_a=1")
    environment.check_jax_environment("train", launched)       # the device count alone differs
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")            # another value the GPU stack reads
    environment.check_jax_environment("train")
    monkeypatch.setenv("XLA_FLAGS", "--xla_b=1")
    environment.check_jax_environment("train")
    assert calls == ["--xla_a=1", "--xla_a=1", "--xla_b=1"]
    monkeypatch.setenv("XLA_FLAGS", "--xla_bad=1")
    for _ in range(2):
        with pytest.raises(UsageError, match="XLA_FLAGS: bad"):
            environment.check_jax_environment("train")
    assert calls[-2:] == ["--xla_bad=1", "--xla_bad=1"]


def test_in_the_obscura_process(tmp_path):
    """Read at start-up: a JAX_* value JAX refuses on import, and a closed stdout, in
    processes of their own (each one line on stderr, exit 2, nothing written)."""
    env = {**os.environ, "JAX_DEFAULT_MATMUL_PRECISION": "bogus"}
    r = subprocess.run([sys.executable, "-m", "obscura_jax", "model-info", "llama2-tiny", "--json", "m.json"],
                       env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and r.stderr == ("obscura: error: environment variable JAX_DEFAULT_MATMUL_PRECISION: JAX "
                                              "does not take 'bogus' (Invalid value \"bogus\" for JAX flag "
                                              "jax_default_matmul_precision)\n"), r.stderr
    # stdout closed by the shell that execs it (a preexec_fn would fork this JAX process)
    r = subprocess.run(["sh", "-c", 'exec "$0" "$@" >&-', sys.executable, "-m", "obscura_jax", "simulate",
                        "--schedule", "1f1b", "--stages", "2", "--microbatches", "2", "--json", "s.json"],
                       cwd=tmp_path, stderr=subprocess.PIPE, text=True, timeout=300)
    assert r.returncode == 2 and r.stderr.startswith("obscura: error: stdout is closed") and r.stderr.count("\n") == 1
    assert os.listdir(tmp_path) == []
