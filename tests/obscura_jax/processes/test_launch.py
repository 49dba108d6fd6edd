"""Starting several processes (obscura_jax.processes.launch, supervise): who a process is,
from flags and OBSCURA_* variables (flags win); bad combinations are one line; a run
whose processes disagree on the transfer order (a test hook swaps two transfers on
one process) stops at start-up with one line naming it, writing nothing; crashing
children are named with their last words; the launcher's rules on SIGTERM and on an
error exit, with stand-in children."""
import os
import re
import signal
import subprocess
import sys

import pytest

from obscura_jax.cli.main import main
from obscura_jax.errors import UsageError
from obscura_jax.processes.launch import free_ports, process_spec, without_flag
from tests.obscura_jax.mp_helpers import FAULTS, TINY, remove_logs, run

ENV = {"OBSCURA_COORDINATOR": "10.0.0.1:1234", "OBSCURA_NUM_PROCESSES": "4", "OBSCURA_PROCESS_ID": "2",
       "OBSCURA_TRANSFER_ADDRESS": "10.0.0.3:5555"}


def test_environment_names_the_process_and_flags_win():
    spec = process_spec(None, None, None, devices=None, environ=ENV)
    assert (spec.coordinator, spec.num_processes, spec.process_id) == ("10.0.0.1:1234", 4, 2)
    assert spec.transfer_address == "10.0.0.3:5555" and spec.platform == "auto"
    assert spec.log_file is None and spec.native_log.endswith(f"obscura-p2-{os.getpid()}.log")
    assert (spec.connect_timeout, spec.join_timeout) == (20.0, 120.0)
    spec = process_spec(None, None, None, devices=None,
                        environ={**ENV, "OBSCURA_LOG_FILE": "/x/p2.log", "OBSCURA_CONNECT_SECONDS": "200"})
    assert spec.native_log == "/x/p2.log" and (spec.connect_timeout, spec.join_timeout) == (200.0, 200.0)
    spec = process_spec("h:9", "2", "1", devices="cpu", devices_per_process=2, environ=ENV)
    assert (spec.coordinator, spec.num_processes, spec.process_id, spec.platform) == ("h:9", 2, 1, "cpu")
    assert spec.devices_per_process == 2
    assert process_spec(None, None, None, devices=None, environ={}) is None
    assert process_spec("h:9", 1, 0, devices=None, environ={}) is None      # one process: no distributed run


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
    # below the kernel's ephemeral range: not a port bind(0) just recycled from another run
    low = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
    assert all(10000 <= p < low for p in ports), ports


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
    rc, text = run(["train", *TINY, "--processes", "4", "--steps", "2", "--json", str(out), *FAULTS], timeout=180,
                   env={"OBSCURA_TEST_SWAP_TRANSFERS": "2"})
    errors = [line for line in text.splitlines() if "obscura: error:" in line]
    assert rc == 2, text[-3000:]
    assert len(errors) == 1, text
    assert "process 2 runs a different schedule and transfer order than process 0" in errors[0]
    assert "Traceback" not in text and not out.exists()
    remove_logs(text)


def _launch_in_child(env: dict, extra_env: dict | None, timeout: float = 120) -> tuple[int, str, str]:
    """launch_local of 2 processes running `obscura train --steps 1`, in a process of its
    own (bounded: on timeout its group is killed; the children die with the launcher)."""
    argv = ["train", *TINY, "--steps", "1"]
    code = ("import sys; from obscura_jax.processes.supervise import launch_local; "
            f"sys.exit(launch_local({argv!r}, 2, extra_env={extra_env!r}))")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True, env=dict(os.environ, **env))
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        out, err = proc.communicate()
        raise AssertionError(f"launcher still running after {timeout} s:\n{out[-2000:]}\n{err[-2000:]}")
    return proc.returncode, out, err


@pytest.mark.parametrize("env, extra_env, cause", [
    ({"XLA_FLAGS": "--xla_no_such_flag=1"}, None, "Unknown flag in XLA_FLAGS"),
    ({}, {"OBSCURA_STEP_STALL_SECONDS": "abc"}, "OBSCURA_STEP_STALL_SECONDS"),
    ({}, {"OBSCURA_HEARTBEAT_SECONDS": "-1"}, "OBSCURA_HEARTBEAT_SECONDS"),
], ids=["xla-flags", "stall", "heartbeat"])
def test_crashing_children_exit_non_zero_with_their_line_on_stderr(env, extra_env, cause):
    """Every child crashes (the launcher once exited 0 when all had ended
    before it looked): a non-zero exit, each message once on stderr naming the
    process that said it, every process's status at the end; stdout keeps no error."""
    rc, out, err = _launch_in_child(env, extra_env)
    assert rc != 0, (out, err)
    lines = err.splitlines()
    named = [line for line in lines if cause in line]
    assert named and all(line.startswith(("[p0] obscura: error:", "[p1] obscura: error:",
                                          "obscura: error: process 0", "obscura: error: process 1"))
                         for line in named), err
    assert len(set(lines)) == len(lines), err
    # every process's end, whatever it was (XLA's abort can take process 1 as SIGABRT)
    assert re.match(r"obscura: processes ended: 0 (status \d+|SIG\w+), 1 (status \d+|SIG\w+); "
                    r"their logs: \S+$", lines[-1]), err
    assert "error:" not in out and "Traceback" not in err
    remove_logs(err)


def test_the_command_line_refuses_a_bad_variable_before_starting_processes(capsys, monkeypatch):
    monkeypatch.setenv("OBSCURA_HEARTBEAT_SECONDS", "-1")
    assert main(["train", *TINY, "--processes", "2", "--steps", "1"]) == 2
    cap = capsys.readouterr()
    assert cap.err.count("\n") == 1 and "OBSCURA_HEARTBEAT_SECONDS" in cap.err and "started" not in cap.out


# Children that stand in for `obscura` processes (no JAX: cheap), for the launcher's own rules.
_CHILD = """
import os, signal, sys, time
rank = int(os.environ["OBSCURA_PROCESS_ID"])
def term(*_):
    print("obscura: terminated: every process got SIGTERM", flush=True)
    os._exit(143)
signal.signal(signal.SIGTERM, term)
print("ready", flush=True)
if rank == 1 and sys.argv[1] == "fail":
    print("obscura: error: bad input", flush=True)
    sys.exit(2)
time.sleep(120)
"""
_LAUNCHER = ("import sys; from obscura_jax.cli import interrupt; interrupt.install(); "
             "from obscura_jax.processes.supervise import launch_local; "
             "sys.exit(launch_local([sys.argv[1]], 2, command=[sys.executable, '-c', sys.argv[2]]))")


@pytest.mark.parametrize("mode", ["sigterm", "fail"])
def test_the_launchers_rules_on_stand_in_children(mode):
    """SIGTERM to the launcher is forwarded to every child, which stop by themselves:
    exit 143, one line for the run (the launcher's). A child that exits with an error line of its
    own: no line from the launcher, the other stopped a few seconds later, exit 2."""
    proc = subprocess.Popen([sys.executable, "-c", _LAUNCHER, mode, _CHILD], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        ready = 0
        while ready < 2:
            line = proc.stdout.readline()
            assert line, proc.stderr.read()
            ready += line.endswith("] ready\n")
        if mode == "sigterm":
            proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    lines = err.splitlines()
    if mode == "sigterm":
        assert proc.returncode == 143 and len(lines) == 2, err
        assert lines[0] == "obscura: terminated by SIGTERM", err        # the launcher's, in the children's stead
        assert lines[1].startswith("obscura: processes ended: 0 status 143, 1 status 143; their logs: "), err
    else:
        assert proc.returncode == 2 and len(lines) == 2 and lines[0] == "[p1] obscura: error: bad input", err
        assert lines[1].startswith("obscura: processes ended: 0 stopped by the launcher, 1 status 2; "), err
    remove_logs(err)
