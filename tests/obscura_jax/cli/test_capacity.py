"""Sizes bounded before anything is built (obscura_jax.cli.capacity): by the devices a
run uses and by the host's memory (faked here at 24 GiB, so no verdict depends on the
machine), each one line with the bytes, exit 2, nothing written."""
import resource

import pytest

import models
from obscura_jax.cli import capacity
from obscura_jax.errors import UsageError
from tests.obscura_jax.cli.commands import badinput

GiB = 2 ** 30


def test_host_memory_is_the_smallest_limit_the_process_runs_under():
    physical = capacity.host_memory_bytes()
    assert 0 < physical
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    try:           # an address-space limit (`ulimit -v`) below the host's memory is the process's memory
        resource.setrlimit(resource.RLIMIT_AS, (physical // 2, hard))
        assert capacity.host_memory_bytes() == physical // 2
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def test_devices_and_processes_within_what_the_run_uses():
    capacity.check_device_count("cpu:4", 4, 1)
    capacity.check_device_count("cpu:8", 2, 4)              # 2 pipeline x (2 data x 2 tensor)
    capacity.check_device_count("cpu:1", 4, 1)              # stages may share devices
    capacity.check_device_count(None, 4, 1, processes=2, devices_per_process=2)
    with pytest.raises(UsageError, match="--devices cpu:1000000: the run uses 4 devices"):
        capacity.check_device_count("cpu:1000000", 4, 1)
    with pytest.raises(UsageError, match="--processes 1000 x --devices-per-process 1 = 1000 devices, but the run "
                                         "uses 4"):
        capacity.check_device_count(None, 4, 1, processes=1000)


def test_host_memory_holds_the_batch_the_state_and_one_micro_batch():
    tiny, big = models.get_config("llama2-tiny"), models.get_config("llama2-28b")
    capacity.check_host_memory(tiny, "adamw", 2, 64, 8, memory=24 * GiB)
    capacity.check_host_memory(big, "adamw", 1, 4096, 32, platform="gpu", memory=24 * GiB)   # devices: not host's
    with pytest.raises(UsageError, match=r"llama2-28b \(88 layers, 28,241,679,360 params\) needs 420.8 GiB for its "
                                         r"params, grads and adamw state alone on CPU"):
        capacity.check_host_memory(big, "adamw", 1, 64, memory=24 * GiB)
    with pytest.raises(UsageError, match="needs .* sgd state alone"):     # sgd keeps no moments: still 2 x params
        capacity.check_host_memory(big, "sgd", 1, 64, memory=24 * GiB)
    with pytest.raises(UsageError, match=r"one step's tokens \(8 micro-batches x 1000000000000 rows x 64 tokens"):
        capacity.check_host_memory(tiny, "adamw", 10 ** 12, 64, 8, platform="gpu", memory=24 * GiB)
    with pytest.raises(UsageError, match=r"one micro-batch of 100000 x 64 tokens takes 19.9 GiB on CPU"):
        capacity.check_host_memory(tiny, "adamw", 100_000, 64, memory=16 * GiB)
    with pytest.raises(UsageError, match=r"llama2-tiny \(1000000000 layers"):
        capacity.check_host_memory(tiny.replace(num_layers=10 ** 9), "adamw", 2, 64, memory=24 * GiB)


TRAIN = ["train", "--steps", "2", "--json", "t.json"]
CASES = [
    (TRAIN + ["--devices", "cpu:1000000"], "--devices cpu:1000000: the run uses 4 devices (4 pipeline devices)"),
    (TRAIN + ["--processes", "1000"], "--processes 1000 x --devices-per-process 1 = 1000 devices, but the run uses 4"),
    (TRAIN + ["--model", "llama2-28b", "--devices", "cpu:4"], "needs 420.8 GiB for its params, grads and adamw state "
                                                             "alone on CPU (451,866,870,472 bytes), more than this "
                                                             "host's 24.0 GiB of memory"),
    (TRAIN + ["--micro-batch-size", "1000000000000"], "one step's tokens"),
    (TRAIN + ["--micro-batch-size", "400000"], "one micro-batch of 400000 x 64 tokens takes 79.4 GiB on CPU"),
    (TRAIN + ["--layers", "1000000000"], "llama2-tiny (1000000000 layers"),
    (["compare", "--steps", "2", "--out", "cmp", "--micro-batch-size", "400000"], "one micro-batch of 400000"),
    (["profile", "--model", "llama2-tiny", "--seq-len", "64", "--micro-batch", "1000000", "--json", "p.json"],
     "one micro-batch of 1000000 x 64 tokens takes 76.5 GiB on CPU"),
    (["plan", "--analytic", "llama2-tiny", "--seq-len", "64", "--stages", "2", "--microbatches", "2",
      "--memory-limit", "1GiB", "--layers", "1000000000"], "--layers must be <= 4096 (a bound of the planner"),
]


def test_the_command_line_answers_before_building(capsys, tmp_path, monkeypatch):
    """Each family of the fuzz's memory blow-ups, hangs and internal errors: one line."""
    monkeypatch.setattr(capacity, "host_memory_bytes", lambda: 24 * GiB)
    for argv, needle in CASES:
        badinput.check(capsys, tmp_path, monkeypatch, argv, needle)
    # What one micro-batch keeps under the run's policies (policy none: every op's
    # output, 2.4 MiB here) on top of the 3.3 MiB of state, on a host faked at 5 MiB:
    # the inputs alone (0.4 MiB) would pass.
    monkeypatch.setattr(capacity, "host_memory_bytes", lambda: 5 * 2 ** 20)
    badinput.check(capsys, tmp_path, monkeypatch, TRAIN, "one micro-batch of 2 x 64 tokens keeps 2.4 MiB over the "
                   "model's units on CPU under the run's recompute policies besides 3.3 MiB of training state")


def test_what_a_micro_batch_keeps_follows_the_recompute_policies():
    from obscura_jax.run.run_config import RunConfig
    tiny = models.get_config("llama2-tiny")
    none, full = (capacity.kept_bytes(RunConfig(micro_batch_size=2, seq_len=64, policy=p), tiny) for p in ("none", "full"))
    adjusted = capacity.kept_bytes(RunConfig(micro_batch_size=2, seq_len=64, schedule="obscura"), tiny)
    assert none > 8 * full and adjusted == full        # obscura adjusts every stage by default: full recompute
    assert capacity.unit_counts(7, 10, 10, ("attn", "mlp")) == {"attn": 1, "mlp": 1, "head": 1}
    assert capacity.unit_counts(0, 2 * 10 ** 9 + 2, 2 * 10 ** 9 + 2, ("attn", "mlp"))["mlp"] == 10 ** 9
