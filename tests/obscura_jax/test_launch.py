"""Starting several processes (obscura_jax.launch): who a process is, from flags and
OBSCURA_* variables (flags win); bad combinations are one line; and a run whose
processes disagree on the transfer order (a test hook swaps two transfers on one
process) stops at start-up with one line naming it, writing nothing."""
import pytest

from obscura_jax.cli import main
from obscura_jax.errors import UsageError
from obscura_jax.launch import ENV_SWAP_TEST, free_ports, process_spec, without_flag
from tests.obscura_jax.mp_helpers import TINY, run

ENV = {"OBSCURA_COORDINATOR": "10.0.0.1:1234", "OBSCURA_NUM_PROCESSES": "4", "OBSCURA_PROCESS_ID": "2",
       "OBSCURA_TRANSFER_ADDRESS": "10.0.0.3:5555"}


def test_environment_names_the_process_and_flags_win():
    spec = process_spec(None, None, None, devices=None, environ=ENV)
    assert (spec.coordinator, spec.num_processes, spec.process_id) == ("10.0.0.1:1234", 4, 2)
    assert spec.transfer_address == "10.0.0.3:5555" and spec.platform == "auto"
    spec = process_spec("h:9", "2", "1", devices="cpu", devices_per_process=2, environ=ENV)
    assert (spec.coordinator, spec.num_processes, spec.process_id, spec.platform) == ("h:9", 2, 1, "cpu")
    assert spec.devices_per_process == 2 and not spec.swap_transfers_for_test
    assert process_spec(None, None, None, devices=None, environ={}) is None
    assert process_spec("h:9", 1, 0, devices=None, environ={}) is None      # one process: no distributed run
    assert process_spec(None, None, None, devices=None, environ={**ENV, ENV_SWAP_TEST: "2"}).swap_transfers_for_test


@pytest.mark.parametrize("flags, message", [
    (("h:9", None, "0"), "need all of --coordinator"),
    (("h:9", "4", "4"), "--process-id must be in 0..3"),
    (("h:9", "four", "0"), "--num-processes must be an integer"),
    (("nohost", "4", "0"), "--coordinator must be HOST:PORT"),
])
def test_incomplete_or_bad_flags_are_one_line(flags, message):
    with pytest.raises(UsageError, match=message):
        process_spec(*flags, devices=None, environ={})


def test_several_processes_take_a_platform_not_a_device_count():
    with pytest.raises(UsageError, match="--devices is cpu or gpu"):
        process_spec("h:9", 2, 0, devices="cpu:4", environ={})


def test_without_flag_and_free_ports():
    assert without_flag(["train", "--processes", "4", "--steps", "3", "--processes=2"], "--processes") == \
        ["train", "--steps", "3"]
    ports = free_ports(5)
    assert len(set(ports)) == 5


@pytest.mark.parametrize("extra, message", [
    (["--processes", "2", "--coordinator", "h:9", "--num-processes", "2", "--process-id", "0"],
     "does not combine with --coordinator"),
    (["--processes", "2", "--devices", "cpu:4"], "--devices is cpu or gpu"),
    (["--processes", "0"], "--processes must be >= 1"),
    (["--devices-per-process", "2", "--devices", "cpu:4"], "--devices-per-process needs --processes"),
])
def test_bad_process_flags_are_refused_before_anything_starts(extra, message, capsys):
    base = [a for a in TINY if a not in ("--devices", "cpu")]
    assert main(["train", *base, *extra]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]


@pytest.mark.slow
def test_a_different_transfer_order_on_one_process_stops_all_at_start_up(tmp_path):
    out = tmp_path / "run.json"
    rc, text = run(["train", *TINY, "--processes", "4", "--steps", "2", "--json", str(out)], timeout=180,
                   env={ENV_SWAP_TEST: "2"})
    errors = [line for line in text.splitlines() if "obscura: error:" in line]
    assert rc == 2, text[-3000:]
    assert len(errors) == 1, text
    assert "process 2 runs a different schedule and transfer order than process 0" in errors[0]
    assert "Traceback" not in text and not out.exists()
