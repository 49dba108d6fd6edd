"""The machine a layout sweep models: one GPU's rates (planner.device: the same
description the analytic profile uses) in nodes of NVLink-connected GPUs.

The cluster numbers are parameters with documented defaults: 8-GPU NVLink nodes of
H200s, with the memory budget set to the 80 GiB of the layouts paper's A100s so its
findings can be compared (pass --gpu-memory 141GB for an H200's full memory).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from planner.device import DEVICES, DeviceSpec
from planner.errors import PlanError
from schedules.sizes import GiB


def _number(name: str, value, positive: bool) -> None:
    ok = not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)
    if not ok or value < 0 or (positive and value == 0):
        raise PlanError(f"hardware {name} must be {'a positive number' if positive else '>= 0'}, "
                        f"got {value!r}")


@dataclass(frozen=True)
class Hardware:
    """Sizes in bytes, bandwidths in bytes/s, latencies in seconds."""

    device: DeviceSpec = field(default_factory=lambda: DEVICES["H200"])
    gpu_memory: float = 80 * GiB
    # CUDA context, cuBLAS/cuDNN workspaces, collective buffers, allocator slack.
    memory_reserve: float = 2 * GiB
    gpus_per_node: int = 8
    # NCCL bus bandwidth of collectives inside an NVLink-4 node (all-reduce busbw on
    # 8 H100/H200 is typically 350-480 GB/s; we take the low end).
    nvlink_bandwidth: float = 360e9
    # Per-GPU bus bandwidth between nodes: one 400 Gb/s NIC per GPU at ~90%.
    internode_bandwidth: float = 45e9
    collective_latency: float = 10e-6     # per collective call (NCCL launch + hops)

    def __post_init__(self) -> None:
        for name in ("gpu_memory", "nvlink_bandwidth", "internode_bandwidth"):
            _number(name, getattr(self, name), positive=True)
        for name in ("memory_reserve", "collective_latency"):
            _number(name, getattr(self, name), positive=False)
        if isinstance(self.gpus_per_node, bool) or not isinstance(self.gpus_per_node, int) \
                or self.gpus_per_node < 1:
            raise PlanError(f"gpus per node must be a positive integer, got {self.gpus_per_node!r}")
        if self.memory_reserve >= self.gpu_memory:
            raise PlanError(f"memory reserve {self.memory_reserve / GiB:.1f} GiB leaves nothing "
                            f"of {self.gpu_memory / GiB:.1f} GiB")

    @property
    def usable_memory(self) -> float:
        return self.gpu_memory - self.memory_reserve

    def collective_bandwidth(self, group_span: int) -> float:
        """Bus bandwidth of a collective whose ranks span `group_span` consecutive
        GPU ranks: inside one node NVLink, else the inter-node network bounds it."""
        return self.nvlink_bandwidth if group_span <= self.gpus_per_node else self.internode_bandwidth

    def to_json(self) -> dict:
        return {"device": self.device.name,
                **{k: getattr(self.device, k) for k in self.device.__dataclass_fields__ if k != "name"},
                **{k: getattr(self, k) for k in self.__dataclass_fields__ if k != "device"}}
