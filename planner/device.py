"""The GPUs the project models, described once: peak and achieved rates, memory and
link bandwidths. The analytic profile (planner.analytic) and the layout sweep
(planner.layouts) both price work with these numbers; nothing else states a rate.

Achieved rates are what a roofline divides FLOPs or bytes by. Where one was
measured on an H200 its comment says so (BENCHMARKS.md holds the runs); the rest are datasheet peaks
times an assumed efficiency, written as that product so the assumption shows.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from planner.errors import PlanError


@dataclass(frozen=True)
class DeviceSpec:
    """Rates in FLOP/s and bytes/s, latency in seconds."""
    name: str
    peak_flops: float              # dense bf16 datasheet peak: the MFU denominator
    matmul_flops: float            # achieved bf16 GEMM rate
    flash_attention_flops: float   # achieved causal flash attention, counting the FLOPs it executes
    hbm_bandwidth: float           # achieved by memory-bound kernels, bytes read + written
    host_bandwidth: float          # host <-> device, per direction
    p2p_bandwidth: float           # device <-> neighbouring device, per direction
    p2p_latency: float = 10e-6

    def __post_init__(self) -> None:
        for name in ("peak_flops", "matmul_flops", "flash_attention_flops", "hbm_bandwidth",
                     "host_bandwidth", "p2p_bandwidth"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
                raise PlanError(f"device {self.name}: {name} must be a positive number, got {v!r}")
        if not (isinstance(self.p2p_latency, (int, float)) and 0 <= self.p2p_latency < math.inf):
            raise PlanError(f"device {self.name}: p2p_latency must be >= 0, got {self.p2p_latency!r}")
        for name in ("matmul_flops", "flash_attention_flops"):
            if getattr(self, name) > self.peak_flops:
                raise PlanError(f"device {self.name}: achieved {name} {getattr(self, name) / 1e12:.0f} "
                                f"TFLOP/s exceeds the peak {self.peak_flops / 1e12:.0f} TFLOP/s")


DEVICES = {
    # A100-SXM4-80GB (the Obscura paper's GPU): 312 TFLOP/s bf16, 2.04 TB/s HBM2e, PCIe 4.0
    # x16 to the host (~25 GB/s achieved), NVLink 3 at 600 GB/s both directions. Nothing was
    # measured on one here: GEMMs at an assumed 60% of peak, flash attention 45%, memory-bound
    # kernels 70% of HBM.
    "A100-80GB": DeviceSpec("A100-80GB", peak_flops=312e12, matmul_flops=312e12 * 0.6,
                            flash_attention_flops=312e12 * 0.45, hbm_bandwidth=2.039e12 * 0.7,
                            host_bandwidth=25e9, p2p_bandwidth=300e9),
    # H200 (= H100 SXM compute): 989 TFLOP/s bf16 dense, 4.8 TB/s HBM3e, NVLink 4 (900 GB/s
    # both directions). Measured on an H200: an 8192^3 bf16 matmul through jax.jit at
    # 789-802 TFLOP/s (0.8 of peak is used), pinned-host copies at 53 GB/s. Assumed: flash
    # attention at 60% of peak (the top of the 45-60% cuDNN/FA-class kernels reach at head dim
    # 128), memory-bound kernels (norms, RoPE, activations, adds) at 70% of the datasheet HBM
    # rate; a plain device-to-device copy reaches 4.3 TB/s, their ceiling.
    "H200": DeviceSpec("H200", peak_flops=989e12, matmul_flops=989e12 * 0.8,
                       flash_attention_flops=989e12 * 0.6, hbm_bandwidth=4.8e12 * 0.7,
                       host_bandwidth=53e9, p2p_bandwidth=450e9),
}


def device_spec(name: str) -> DeviceSpec:
    """The described device `name`; an unknown name is a one-line PlanError."""
    if name not in DEVICES:
        raise PlanError(f"unknown device {name!r} (known: {', '.join(DEVICES)})")
    return DEVICES[name]
