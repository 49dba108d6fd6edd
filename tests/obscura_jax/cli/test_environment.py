"""The environment variables the project reads (obscura_jax.cli.environment): a value
its reader would not take is one line naming the variable, exit 2, before any work;
valid and empty values pass."""
import pytest

from obscura_jax.cli.main import main
from obscura_jax.cli.environment import check_environment
from obscura_jax.errors import UsageError

GOOD = {"OBSCURA_COORDINATOR": "10.0.0.1:1234", "OBSCURA_NUM_PROCESSES": "4", "OBSCURA_PROCESS_ID": "0",
        "OBSCURA_TRANSFER_ADDRESS": "[::1]:5555", "OBSCURA_LOCAL_DEVICE_IDS": "0,1",
        "OBSCURA_HEARTBEAT_SECONDS": "2.5", "OBSCURA_STEP_STALL_SECONDS": "30",
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
