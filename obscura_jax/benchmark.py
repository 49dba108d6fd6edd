"""Engine benchmarks (scripts/bench_engine.py is the entry point).

CPU mode (in one process, emulated devices): engine efficiency = measured iteration
time / the simulator's prediction from costs measured in the same run, for 1F1B and
Obscura, and the host dispatch overhead per action.

GPU mode: each configuration runs as its own `python -m obscura_jax train` process
(so memory_stats peaks belong to one run), all stages on one GPU by default, a
Llama-2 config of about 1B parameters per stage (llama2-7b shapes, 16 layers -> 4
per stage at p=4), seq 4096, bf16 activations. Runs: 1F1B; Obscura with swapping;
the same Obscura schedule with SO/SI as no-ops. Fraction of swap time hidden:
    1 - max(0, T_swap - T_noswap) / (bytes_out / bw_out + bytes_in / bw_in)
with bw the standalone transfer bandwidth measured in the same run.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from schedules.jsonio import write_json_atomic

CPU_RUNS = {
    "1f1b": dict(schedule="1f1b"),
    "obscura": dict(schedule="obscura", adjusted=1, swap_blocks=2, swap_fraction=0.5),
}


def cpu_bench(out: Path, steps: int, seq_len: int, micro_batch_size: int, microbatches: int,
              devices: int, log=print) -> dict:
    from obscura_jax.devices import request_host_devices
    request_host_devices(devices)
    from obscura_jax.placement import place_stages
    from obscura_jax.run_config import RunConfig
    from obscura_jax.trainer import summarize, train

    results = {}
    for label, kw in CPU_RUNS.items():
        run = RunConfig(model="llama2-tiny", stages=4, microbatches=microbatches, steps=steps,
                        micro_batch_size=micro_batch_size, seq_len=seq_len, data="synthetic",
                        cost_reps=5, warmup_steps=2, **kw)
        outcome = train(run, lambda p: place_stages(p, "cpu", devices), log=log)
        res = summarize(outcome)
        actions = sum(len(v) for v in outcome.dispatch.values())
        issue_per_iter = sum(sum(v) for v in outcome.dispatch.values()) / len(outcome.steps)
        results[label] = {
            "iteration_time": res["iteration_time"],
            "simulated_iteration_time": res["simulated_iteration_time"],
            "measured_over_simulated": res["iteration_time"] / res["simulated_iteration_time"],
            "recorded_iteration_makespan": res["timeline"]["makespan"] if res["timeline"] else None,
            "dispatch_us": res["dispatch_us"],
            "dispatch_us_median": res["dispatch_us"]["all_median"],
            "host_issue_seconds_per_iteration": issue_per_iter,
            "actions_per_iteration": actions // len(outcome.steps),
            "step_seconds": res["step_seconds"], "swap": res["swap"],
            "peak_bytes": [st["peak_bytes"] for st in res["stages"]],
            "simulated_peak_bytes": [st.get("simulated_peak_bytes") for st in res["stages"]],
        }
        write_json_atomic(out / f"cpu_{label}.json", res)
        r = results[label]
        log(f"{label:8s} measured {r['iteration_time'] * 1e3:7.1f} ms  simulated "
            f"{r['simulated_iteration_time'] * 1e3:7.1f} ms  ratio {r['measured_over_simulated']:.2f}  "
            f"dispatch/action mean {r['dispatch_us']['all']:.0f} us, median {r['dispatch_us_median']:.0f} us  "
            f"host issue {issue_per_iter * 1e3:.1f} ms/iteration")
    summary = {"mode": "cpu", "model": "llama2-tiny", "stages": 4, "microbatches": microbatches,
               "micro_batch_size": micro_batch_size, "seq_len": seq_len, "devices": devices,
               "steps": steps, "runs": results}
    write_json_atomic(out / "bench_cpu.json", summary)
    return summary


def gpu_configs(layers: int, seq_len: int, microbatches: int, steps: int, mechanisms: list[str]) -> dict:
    base = ["--model", "llama2-7b", "--stages", "4", "--microbatches", str(microbatches),
            "--micro-batch-size", "1", "--seq-len", str(seq_len), "--compute-dtype", "bfloat16",
            "--steps", str(steps), "--warmup-steps", "2", "--devices", "gpu", "--no-progress",
            "--layers", str(layers)]
    swap = ["--schedule", "obscura", "--adjusted", "1", "--swap-blocks", "2", "--swap-fraction", "0.5"]
    runs = {"1f1b": base + ["--schedule", "1f1b"]}
    for mech in mechanisms:
        runs[f"obscura_swap_{mech}"] = base + swap + ["--swap-mechanism", mech]
    runs["obscura_noswap"] = base + swap + ["--no-swap"]
    return runs


def _hidden_fraction(swap_run: dict, noswap_run: dict):
    sw = swap_run["swap"]
    if not sw.get("standalone_gbps_out") or not sw.get("bytes_out"):
        return None
    steps = len(swap_run["steps"])
    per_iter_out = sw["bytes_out"] / steps
    per_iter_in = sw["bytes_in"] / steps
    alone = per_iter_out / (sw["standalone_gbps_out"] * 1e9) + per_iter_in / (sw["standalone_gbps_in"] * 1e9)
    extra = max(0.0, swap_run["iteration_time"] - noswap_run["iteration_time"])
    return {"swap_seconds_alone_per_iteration": alone, "added_seconds_per_iteration": extra,
            "fraction_hidden": max(0.0, 1.0 - extra / alone) if alone > 0 else None}


def gpu_bench(out: Path, layers: int, seq_len: int, microbatches: int, steps: int,
              mechanisms: list[str], timeout: float, only: list[str] | None = None, log=print) -> dict:
    env = dict(os.environ)
    env.setdefault("XLA_PYTHON_CLIENT_MEM_FRACTION", "0.95")
    # The runs share most stage programs: compile them once across the processes.
    env.setdefault("JAX_COMPILATION_CACHE_DIR", "/tmp/obscura_jax_compile_cache")
    results, failures = {}, {}
    configs = gpu_configs(layers, seq_len, microbatches, steps, mechanisms)
    unknown = sorted(set(only or ()) - set(configs))
    if unknown:
        raise ValueError(f"unknown run(s) {', '.join(unknown)}; runs: {', '.join(configs)}")
    for label, argv in configs.items():
        if only and label not in only:
            continue
        path = out / f"gpu_{label}.json"
        cmd = [sys.executable, "-m", "obscura_jax", "train", *argv, "--json", str(path)]
        log(f"== {label}: {' '.join(cmd[2:])}")
        try:
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            failures[label] = f"timed out after {timeout:.0f} s"
            log(f"   {failures[label]}")
            continue
        log(proc.stdout.rstrip())
        if proc.returncode != 0 or not path.exists():
            failures[label] = (proc.stderr.strip().splitlines() or ["exit %d" % proc.returncode])[-1]
            log(f"   failed: {failures[label]}")
            continue
        results[label] = json.loads(path.read_text())
    summary = {"mode": "gpu", "model": f"llama2-7b shapes, {layers} layers", "stages": 4,
               "microbatches": microbatches, "seq_len": seq_len, "steps": steps,
               "failures": failures, "runs": {}}
    for label, res in results.items():
        row = {"iteration_time": res["iteration_time"],
               "simulated_iteration_time": res["simulated_iteration_time"],
               "simulated_serial_time": res.get("simulated_serial_time"),
               "tokens_per_second": res["tokens_per_second"], "swap": res["swap"],
               "dispatch_us": res["dispatch_us"],
               "device_peak_bytes": max((st["device_peak_bytes"] or 0) for st in res["stages"]) or None,
               "stages": [{k: st.get(k) for k in ("units", "policy", "param_bytes", "weight_bytes",
                                                 "residual_bytes_per_microbatch", "accounted_peak_bytes",
                                                 "simulated_peak_bytes", "peak_activation_bytes")}
                          for st in res["stages"]],
               "simulated_peak_sum": sum(st.get("simulated_peak_bytes") or 0 for st in res["stages"]),
               "accounted_peak_sum": sum(st["accounted_peak_bytes"] for st in res["stages"])}
        if label.startswith("obscura_swap") and "obscura_noswap" in results:
            row["hidden"] = _hidden_fraction(res, results["obscura_noswap"])
        summary["runs"][label] = row
    write_json_atomic(out / "bench_gpu.json", summary)
    for label, row in summary["runs"].items():
        sw = row["swap"]
        hid = (row.get("hidden") or {}).get("fraction_hidden")
        log(f"{label:22s} iter {row['iteration_time'] * 1e3:8.1f} ms  serial-sim "
            f"{(row['simulated_serial_time'] or 0) * 1e3:8.1f} ms  device peak "
            f"{(row['device_peak_bytes'] or 0) / 2**30:6.1f} GiB  sum sim peaks "
            f"{row['simulated_peak_sum'] / 2**30:6.1f} GiB"
            + (f"  swap {sw.get('standalone_gbps_out') or 0:.1f}/{sw.get('standalone_gbps_in') or 0:.1f} GB/s "
               f"(in-run {sw.get('measured_gbps_out') or 0:.1f}/{sw.get('measured_gbps_in') or 0:.1f}, "
               f"overlap {sw.get('overlap_with_compute') or 0:.0%})"
               if sw.get("bytes_out") else "")
            + (f"  hidden {hid:.0%}" if hid is not None else ""))
    return summary
