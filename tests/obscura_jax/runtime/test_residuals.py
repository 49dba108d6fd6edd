"""Residual bytes in host memory are not device memory: a micro-batch's offloaded
leaves (obscura_jax.runtime.residuals), the swap's choice of leaves, the memory
ledger's two tallies, and the processes' digest of a run whose policy is a
RecomputePolicy (its sets as sorted lists, whatever the process's string hashing)."""
import os
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np

from obscura_jax.runtime.executor import MemoryLedger
from obscura_jax.runtime.residuals import Residuals, device_sizes, host_slots, memory_kind
from obscura_jax.runtime.swap import HostSwap, choose_leaves
from schedules.ir import Action, Kind

ROOT = Path(__file__).resolve().parents[3]


def test_offloaded_leaves_count_as_host_bytes_and_are_never_swapped():
    res = Residuals(tuple(np.zeros(n, np.int8) for n in (100, 40, 7)), (100, 40, 7), offloaded=(0,))
    assert (res.nbytes, res.offloaded_bytes, res.host_bytes, res.device_bytes) == (147, 100, 0, 47)
    assert res.device_sizes == (0, 40, 7) == device_sizes(res.sizes, (0,))
    assert choose_leaves(res.device_sizes, 1.0) == (1, 2)     # the largest leaf is on host already
    assert choose_leaves((0, 0), 1.0) == ()


def test_a_swap_moves_device_leaves_only_and_counts_them_apart():
    dev = jax.devices()[1]
    host = jax.sharding.SingleDeviceSharding(dev, memory_kind="pinned_host")
    leaves = (jax.device_put(np.ones(64, np.float32), host), jax.device_put(np.ones(16, np.float32), dev))
    res = Residuals(leaves, (256, 64), offloaded=host_slots([x.sharding.memory_kind for x in leaves]))
    assert res.offloaded == (0,)
    out = HostSwap().swap_out(res, 1.0, dev)
    assert out.host_slots == (1,) and out.host_bytes == 64 and out.device_bytes == 0
    assert out.host_resident_bytes == 320
    back = HostSwap().swap_in(out, dev)
    assert back.leaves[0] is leaves[0] and back.device_bytes == 64
    assert memory_kind(jax.ShapeDtypeStruct((1,), np.float32, sharding=host), dev) == "pinned_host"
    plain = jax.ShapeDtypeStruct((1,), np.float32, sharding=jax.sharding.SingleDeviceSharding(dev))
    assert memory_kind(plain, dev) == dev.default_memory().kind


def test_the_ledger_keeps_host_bytes_out_of_the_device_peak():
    f0, f1, so, b0, b1 = (Action(0, Kind.F, 0), Action(0, Kind.F, 1), Action(0, Kind.SO, 0),
                          Action(0, Kind.B, 1), Action(0, Kind.B, 0))
    ledger = MemoryLedger.zeros(1)
    for note in ((f0, 0, "alloc", 100, 30), (f1, 0, "alloc", 100, 30), (so, 0, "swap_out", 60),
                 (b1, 0, "free", 100, 30), (b0, 0, "free", 40, 90)):
        ledger.note(*note)
    ledger.settle({a: i for i, a in enumerate((f0, f1, so, b1, b0))})
    assert (ledger.live, ledger.peak) == ([0], [200])        # both forwards' device parts, before SO
    assert (ledger.host_live, ledger.host_peak) == ([0], [120])    # offloaded 30 + 30, then 60 swapped


DIGEST = """
import dataclasses, models, schedules
from obscura_jax import RunConfig
from obscura_jax.runtime.messages import order_digest
run = RunConfig(policy=models.resolve_policy("cmb", "llama", offload="mlp_gate,mlp_up,q,k,v"))
sched = schedules.generate("1f1b", 2, 2)
print(order_digest(sched, schedules.issue_order(sched), [], [0, 0], [], {"run": dataclasses.asdict(run)})[0])
"""


def test_a_policy_with_sets_digests_alike_in_every_process():
    """The processes of one run hash its settings (agreement.check_order: the RunConfig
    as a dict): a frozenset's order follows the process's string hashing, so the
    digest must sort it."""
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    digests = {subprocess.run([sys.executable, "-c", DIGEST], capture_output=True, text=True, timeout=120, check=True,
                              env={**env, "PYTHONHASHSEED": seed}).stdout.strip() for seed in ("1", "2", "3")}
    assert len(digests) == 1 and len(next(iter(digests))) == 64
