"""The compare table's notes: the bubble's definition, CPU times illustrative, and a
line for each pair of runs whose measured order contradicts the simulated one."""
from obscura_jax.observe.report import CPU_NOTE, compare_report, order_conflicts


def run(label, measured, simulated, devices=("cpu:0", "cpu:1")):
    return {"label": label, "schedule": label.split(":")[0], "iteration_time": measured,
            "simulated_iteration_time": simulated, "tokens_per_second": 1.0, "bubble_fraction": 0.25,
            "losses": [2.0, 1.0], "devices": list(devices), "stages": [{"peak_bytes": 1024}]}


def test_a_contradicted_order_is_said_and_cpu_times_are_illustrative():
    runs = [run("1f1b", 0.1373, 0.1040), run("obscura:adjusted=1", 0.1096, 0.1200)]
    text = compare_report(runs)
    assert "bubble = device-seconds idle within the iteration (optimizer step included in the iteration) / " \
           "(devices x iteration time)" in text
    assert f"note: {CPU_NOTE}" in text
    assert ("note: obscura:adjusted=1 measured faster than 1f1b (109.6 ms vs 137.3 ms) but simulated slower "
            "(120.0 ms vs 104.0 ms): the measured order contradicts the simulator's; CPU timings are "
            "illustrative") in text.splitlines()


def test_agreeing_orders_and_gpu_runs_say_nothing_more():
    agree = [run("1f1b", 0.15, 0.10), run("obscura", 0.14, 0.08)]
    assert order_conflicts(agree) == [] and "measured faster" not in compare_report(agree)
    gpu = [run("1f1b", 0.15, 0.10, ("gpu:0",)), run("obscura", 0.14, 0.12, ("gpu:0",))]
    text = compare_report(gpu)
    assert CPU_NOTE not in text and "illustrative" not in text
    assert "obscura measured faster than 1f1b" in text
