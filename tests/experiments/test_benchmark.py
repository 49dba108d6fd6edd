"""The engine benchmark's reading of an nvidia-smi log (experiments.benchmark): busy
samples of a run's time window, medians and throttle reasons; and the lines it prints
for a GPU run (measured / one-GPU serial simulation, dispatch per action, clocks)."""
from datetime import datetime

import pytest

from experiments.benchmark import _gpu_lines, busy_window

HEADER = ("timestamp, clocks.current.sm [MHz], clocks.current.memory [MHz], power.draw [W], temperature.gpu, "
          "utilization.gpu [%], clocks_event_reasons.active\n")


def stamp(t: float) -> str:
    return datetime.fromtimestamp(t).strftime("%Y/%m/%d %H:%M:%S.%f")[:-3]


def test_busy_window_keeps_busy_samples_inside_the_window(tmp_path):
    t0 = 1_800_000_000.0
    rows = [(t0 - 5, 1980, 300, 100, "0x0000000000000000"),       # before the window
            (t0 + 1, 345, 80, 0, "0x0000000000000001"),           # idle
            (t0 + 2, 1500, 699, 100, "0x0000000000000004"),
            (t0 + 3, 1520, 701, 98, "0x0000000000000004"),
            (t0 + 4, 1980, 420, 100, "0x0000000000000000")]
    path = tmp_path / "smi.csv"
    path.write_text(HEADER + "".join(f"{stamp(t)}, {sm} MHz, 3201 MHz, {w} W, 40, {u} %, {r}\n"
                                     for t, sm, w, u, r in rows) + "garbage line\n")
    got = busy_window(path, t0, t0 + 10)
    assert got["busy_samples"] == 3 and got["sm_clock_mhz"] == 1520 and got["power_w"] == 699
    assert got["throttle_reasons"] == ["0x0000000000000000", "0x0000000000000004"]
    assert busy_window(path, t0 + 100, t0 + 200) is None
    assert busy_window(tmp_path / "missing.csv", t0, t0 + 1) is None


BASE_ROW = {"iteration_time": 1.30, "simulated_serial_time": 1.25, "measured_over_serial_simulation": 1.04,
            "device_peak_bytes": 2**36, "simulated_peak_sum": 2**35, "swap": {"bytes_out": 0},
            "dispatch_us": {"all_median": 14000.0}}


def test_gpu_lines_give_the_serial_ratio_dispatch_and_clocks():
    row = {"iteration_time": 1.30, "simulated_serial_time": 1.25, "measured_over_serial_simulation": 1.04,
           "device_peak_bytes": 2**36, "simulated_peak_sum": 2**35, "swap": {"bytes_out": 0},
           "dispatch_us": {"all_median": 14000.0, "all": 18000.0, "all_p10": 1300.0, "F": 9900.0, "B": 25900.0},
           "gpu_clocks": {"sm_clock_mhz": 1500, "power_w": 700, "throttle_reasons": ["0x4"], "busy_samples": 9}}
    text = "\n".join(_gpu_lines("1f1b", row))
    assert "= 1.040" in text and "median 14,000 us" in text and "SM clock median 1500 MHz" in text


def test_memory_row_puts_the_checked_estimate_beside_the_measured_peak():
    """Each run's JSON `memory` (the estimate `train` checks) on its fullest device,
    beside memory_stats' peak; within means measured <= predicted <= 1.05 x measured."""
    from experiments.benchmark import memory_row
    dev = lambda name, p, m: {"device": name, "predicted_bytes": p, "phase": "steps",  # noqa: E731
                              "measured_peak_bytes": m, "predicted_over_measured": p / m if m else None}
    res = {"memory": {"devices": [dev("gpu:0", 103 * 2**30, 100 * 2**30), dev("gpu:1", 1.0, 1.0)]}}
    row = memory_row(res)
    assert row["device"] == "gpu:0" and row["within"] and row["predicted_over_measured"] == 1.03
    line = "\n".join(_gpu_lines("zb_h1", {**BASE_ROW, "memory": row}))
    assert "memory gpu:0: predicted 103.00 GiB (steps) / measured peak 100.00 GiB = 1.030" in line
    res["memory"]["devices"][0]["predicted_over_measured"] = 0.99
    assert memory_row(res)["within"] is False
    assert "OUTSIDE [1, 1.05]" in "\n".join(_gpu_lines("zb_h1", {**BASE_ROW, "memory": memory_row(res)}))
    assert memory_row({"memory": None}) is None
    assert memory_row({"memory": {"devices": [dev("cpu:0", 5.0, None)]}})["within"] is None


def test_breakdown_of_the_h200_power_cap_run():
    """results/h200/power_cap/gpu_1f1b.json (the run that found the 12%): no gaps, and
    every F and B ~9-10% longer in the pipeline than its standalone (boost-clock) cost."""
    import json
    from pathlib import Path

    from experiments.benchmark import pipeline_breakdown
    res = json.loads((Path(__file__).resolve().parents[2] / "results/h200/power_cap/gpu_1f1b.json").read_text())
    b = pipeline_breakdown(res)
    assert abs(b["idle_seconds"]) < 1e-9 and b["compute_seconds"] == b["makespan"]
    assert 1.08 < b["F_pipeline_over_standalone"] < 1.09 and 1.10 < b["B_pipeline_over_standalone"] < 1.11


def test_gpu_mode_runs_zb_h1_beside_1f1b_and_breaks_down_its_split_backward():
    from experiments.benchmark import gpu_configs, pipeline_breakdown
    runs = gpu_configs(16, 4096, 8, 6, ["device_put"], only=["1f1b", "zb_h1"])
    assert "zb_v_balanced" not in runs     # planned only where it runs
    assert runs["zb_h1"][runs["zb_h1"].index("--schedule") + 1] == "zb-h1"
    assert runs["1f1b"][runs["1f1b"].index("--schedule") + 1] == "1f1b"
    # one stage: F 0..1, I 1..3, W 3..4 against standalone F 1, I 1.5, W 1 -> backward 3 / 2.5
    res = {"costs": {"fwd": [1.0], "bwd": [2.0], "recompute": [0.0], "input_grad": [1.5], "weight_grad": [1.0]},
           "stages": [{"adjusted": False}],
           "timeline": {"makespan": 5.0, "stages": [{"ops": [{"action": "F0", "start": 0.0, "end": 1.0},
                                                             {"action": "I0", "start": 1.0, "end": 3.0},
                                                             {"action": "W0", "start": 3.0, "end": 4.0}]}]}}
    b = pipeline_breakdown(res)
    assert b["F_pipeline_over_standalone"] == 1.0 and b["B_pipeline_over_standalone"] == 3.0 / 2.5
    assert b["compute_seconds"] == 4.0 and b["idle_seconds"] == 1.0


def test_the_balanced_zb_v_runs_on_the_planners_partition():
    """`zb_v_balanced`: ZB-V on the partition planner.families.balanced_partition makes
    for the bench's model (here the CPU smoke's llama2-tiny, 10 units on 8 chunks):
    device 0's first chunk gives units to its last."""
    from experiments.benchmark import gpu_configs
    argv = gpu_configs(16, 64, 8, 2, ["device_put"], cpu_smoke=True, only=["zb_v_balanced"])["zb_v_balanced"]
    counts = [int(n) for n in argv[argv.index("--partition") + 1].split(",")]
    assert argv[argv.index("--schedule") + 1] == "zb-v" and argv[argv.index("--head-weight-grad") + 1] == "at-once"
    assert argv[argv.index("--first-weight-grad") + 1] == "at-once"      # the order the planner balanced
    joined = gpu_configs(16, 64, 8, 2, ["device_put"], cpu_smoke=True, only=["zb_h1_joined"])["zb_h1_joined"]
    assert joined[joined.index("--schedule") + 1] == "zb-h1"
    assert joined[joined.index("--first-weight-grad") + 1] == "at-once"
    assert len(counts) == 8 and sum(counts) == 10 and min(counts) >= 1
    assert counts != [2, 1, 1, 1, 1, 1, 1, 2] and counts[-1] > counts[0]


def test_zero_bubble_rows_compare_largest_peaks_per_stage_or_device():
    from experiments.benchmark import zero_bubble_rows
    one = [{"pipeline_device": d, "accounted_peak_bytes": b} for d, b in enumerate((40.0, 30.0, 20.0, 10.0))]
    runs = {"1f1b": {"iteration_time": 1.0, "stages": one},
            "zb_h1": {"iteration_time": 1.01, "stages": [{**st, "accounted_peak_bytes": 41.0 - 10 * i}
                                                       for i, st in enumerate(one)]},
            # a V-shaped run: per device, its stages' weights + the device's measured
            # activation peak (not the stages' peaks summed) + the larger scratch
            "zb_v": {"iteration_time": 0.9,
                     "stages": [{"pipeline_device": d, "accounted_peak_bytes": 19.0, "weight_bytes": 5.0,
                                 "temp_bytes": 1.0 + (s == 7)} for s, d in enumerate((0, 1, 2, 3, 3, 2, 1, 0))],
                     "device_activation_peak_bytes": [25.0, 20.0, 20.0, 20.0]}}
    z = zero_bubble_rows(runs)
    assert z["zb_h1"]["peak_ratio"] == pytest.approx(41 / 40) and z["zb_h1"]["per"] == "stage"
    assert z["zb_v"]["peak_ratio"] == pytest.approx((5 + 5 + 25 + 2) / 40) and z["zb_v"]["per"].startswith("device")
    assert z["zb_v"]["time_ratio"] == pytest.approx(0.9)
    assert zero_bubble_rows({"zb_h1": runs["zb_h1"]}) == {}
