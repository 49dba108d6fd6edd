"""The machine a layout sweep models: per-GPU rates, memory and interconnect.

Every number is a parameter with a documented default; the defaults describe an
H200 cluster of 8-GPU NVLink nodes (the project's GPU machine, measured where we
could), except the memory budget, which defaults to the 80 GiB of the layouts
paper's A100s so its findings can be compared (pass --gpu-memory 141GB for an
H200's full memory).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

GiB = 1024 ** 3

_SIZE_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)\s*$")
_UNITS = {"": 1, "b": 1, "kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12,
          "kib": 1024, "mib": 1024 ** 2, "gib": GiB, "tib": 1024 ** 4}


def parse_bytes(text: str | float | int, allow_zero: bool = False) -> float:
    """'80GiB', '85.9GB', '141e9' or a number -> bytes. Bad text -> ValueError."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        value = float(text)
    else:
        m = _SIZE_RE.match(str(text))
        unit = m.group(2).lower() if m else None
        if not m or unit not in _UNITS:
            raise ValueError(f"cannot read a memory size from {text!r} (e.g. 80GiB, 85.9GB, 141e9)")
        value = float(m.group(1)) * _UNITS[unit]
    if not math.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
        raise ValueError(f"memory size must be {'>=' if allow_zero else '>'} 0, got {text!r}")
    return value


def _positive(name: str, value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or value <= 0:
        raise ValueError(f"hardware {name} must be a positive number, got {value!r}")


@dataclass(frozen=True)
class Hardware:
    """Rates in FLOP/s and bytes/s, sizes in bytes, latencies in seconds."""

    # MFU denominator: H200 (= H100 SXM) dense bf16 peak, datasheet.
    peak_flops: float = 989e12
    # Achieved bf16 GEMM rate: a plain 8192^3 matmul through jax.jit on the project's
    # H200 (device-notes.md, ~789 TFLOP/s). Layer GEMMs are smaller; the measured
    # layer costs, not this number, are the truth once the GPU file exists.
    matmul_flops: float = 789e12
    # Achieved rate of fused (flash) attention, counted in FLOPs it executes (causal:
    # half the square). cuDNN/FA-2-class kernels on Hopper reach roughly 45-60% of
    # peak at head dim 128; 450 TFLOP/s is the conservative end.
    flash_attention_flops: float = 450e12
    # Achieved HBM bandwidth: ~4.3 TB/s device-to-device copy measured on the H200
    # (KINDS.md), against 4.8 TB/s datasheet. Bounds elementwise ops and XLA's
    # unfused softmax.
    hbm_bandwidth: float = 4.3e12
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
    p2p_latency: float = 10e-6

    def __post_init__(self) -> None:
        for name in ("peak_flops", "matmul_flops", "flash_attention_flops", "hbm_bandwidth",
                     "gpu_memory", "nvlink_bandwidth", "internode_bandwidth"):
            _positive(name, getattr(self, name))
        for name in ("memory_reserve", "collective_latency", "p2p_latency"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise ValueError(f"hardware {name} must be >= 0, got {v!r}")
        if isinstance(self.gpus_per_node, bool) or not isinstance(self.gpus_per_node, int) \
                or self.gpus_per_node < 1:
            raise ValueError(f"gpus per node must be a positive integer, got {self.gpus_per_node!r}")
        if self.memory_reserve >= self.gpu_memory:
            raise ValueError(f"memory reserve {self.memory_reserve / GiB:.1f} GiB leaves nothing "
                             f"of {self.gpu_memory / GiB:.1f} GiB")
        if self.matmul_flops > self.peak_flops:
            raise ValueError(f"achieved matmul rate {self.matmul_flops / 1e12:.0f} TFLOP/s exceeds "
                             f"the peak {self.peak_flops / 1e12:.0f} TFLOP/s")

    @property
    def usable_memory(self) -> float:
        return self.gpu_memory - self.memory_reserve

    def collective_bandwidth(self, group_span: int) -> float:
        """Bus bandwidth of a collective whose ranks span `group_span` consecutive
        GPU ranks: inside one node NVLink, else the inter-node network bounds it."""
        return self.nvlink_bandwidth if group_span <= self.gpus_per_node else self.internode_bandwidth

    def to_json(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}
