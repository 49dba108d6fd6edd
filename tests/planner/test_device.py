"""The one device description (planner.device) that the analytic profile and the
layout sweep both price work with."""
import dataclasses

import pytest

import models
from planner.analytic import analytic_profile
from planner.device import DEVICES, DeviceSpec, device_spec
from planner.errors import PlanError
from planner.layouts import Hardware


def test_h200_numbers():
    h200 = device_spec("H200")
    assert h200.peak_flops == 989e12 and h200.host_bandwidth == 53e9          # datasheet; measured
    assert h200.matmul_flops == pytest.approx(791.2e12)                       # measured 789-802
    assert h200.matmul_flops < h200.peak_flops and h200.flash_attention_flops < h200.peak_flops


def test_the_sweep_and_the_analytic_profile_share_it():
    assert Hardware().device is DEVICES["H200"]
    # the analytic profile's matmul ops run at the device's achieved GEMM rate
    prof = analytic_profile(models.get_config("llama2-13b"), 4096, 1, "H200")
    gate = prof.unit("mlp").op("mlp_gate").fwd_time
    assert gate == pytest.approx(2 * 4096 * 5120 * 13824 / DEVICES["H200"].matmul_flops)
    assert prof.host_bandwidth == DEVICES["H200"].host_bandwidth


def test_bad_names_and_numbers_are_user_errors():
    with pytest.raises(PlanError, match="unknown device 'B200'"):
        device_spec("B200")
    with pytest.raises(PlanError, match="exceeds the peak"):
        dataclasses.replace(DEVICES["H200"], matmul_flops=2e15)
    with pytest.raises(PlanError, match="must be a positive number"):
        DeviceSpec("x", 1e12, 1e12, 1e12, 0.0, 1e9, 1e9)
