"""Engine benchmarks (scripts/bench/bench_engine.py is the entry point).

CPU mode (emulated devices; in one process, or `processes` local processes sharing
the devices): engine efficiency = measured iteration time / the simulator's
prediction from costs measured in the same run, for 1F1B and Obscura, and the host
dispatch overhead per action.

GPU mode: each configuration runs as its own `python -m obscura_jax train` process
(so memory_stats peaks belong to one run), all stages on one GPU by default, a
Llama-2 config of about 1B parameters per stage (llama2-7b shapes, 16 layers -> 4
per stage at p=4), seq 4096, bf16 activations. Runs: 1F1B; ZB-H1 (split backward:
I and W as their own programs) and ZB-V, each also with the head's W at once, and
ZB-V on a partition balanced for memory (experiments.engine_partition); Obscura with swapping; the same Obscura schedule
with SO/SI as no-ops; Recomp-All (DAPPLE+) with unit- and with layer-granular full
recompute. Fraction of swap time hidden:
    1 - max(0, T_swap - T_noswap) / (bytes_out / bw_out + bytes_in / bw_in)
with bw the standalone transfer bandwidth measured in the same run. Each run prints
measured / one-GPU serial simulation (every stage's work in turn on the one GPU, from
the run's steady-state costs), host dispatch per action and the memory check's
predicted device peak beside the measured one (memory_row); with `smi_log` an
nvidia-smi log (SM clock, power, throttle reasons every 250 ms) runs beside them and
each run's busy-sample medians are reported (GpuClockLog).
"""
from __future__ import annotations

import csv
import json
import os
import statistics
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

from experiments.engine_partition import zb_v_balanced_counts
from obscura_jax.devices import request_host_devices
from obscura_jax.errors import UsageError
from schedules.ir import Action
from schedules.formats.jsonio import write_json_atomic

CPU_RUNS = {
    "1f1b": dict(schedule="1f1b"),
    "obscura": dict(schedule="obscura", adjusted=1, swap_blocks=2, swap_fraction=0.5),
}


def cpu_bench(out: Path, steps: int, seq_len: int, micro_batch_size: int, microbatches: int,
              devices: int, processes: int = 1, log=print) -> dict:
    """CPU mode: each run in this process, or (processes > 1) as `obscura train
    --processes N` with devices // N emulated devices per process."""
    results = {}
    for label, kw in CPU_RUNS.items():
        if processes > 1:
            res = _cpu_run_processes(out / f"cpu_{label}_p{processes}.json", kw, steps, seq_len,
                                     micro_batch_size, microbatches, devices, processes)
        else:
            res = _cpu_run_here(kw, steps, seq_len, micro_batch_size, microbatches, devices, log)
            write_json_atomic(out / f"cpu_{label}.json", res)
        actions = sum(len(st["ops"]) for st in res["simulated_timeline"]["stages"])
        issue_per_iter = res["dispatch_us"]["all"] * actions / 1e6
        results[label] = {
            "iteration_time": res["iteration_time"],
            "simulated_iteration_time": res["simulated_iteration_time"],
            "measured_over_simulated": res["iteration_time"] / res["simulated_iteration_time"],
            "recorded_iteration_makespan": res["timeline"]["makespan"] if res["timeline"] else None,
            "dispatch_us": res["dispatch_us"],
            "dispatch_us_median": res["dispatch_us"]["all_median"],
            "host_issue_seconds_per_iteration": issue_per_iter,
            "actions_per_iteration": actions,
            "step_seconds": res["step_seconds"], "swap": res["swap"],
            "peak_bytes": [st["peak_bytes"] for st in res["stages"]],
            "simulated_peak_bytes": [st.get("simulated_peak_bytes") for st in res["stages"]],
        }
        r = results[label]
        log(f"{label:8s} measured {r['iteration_time'] * 1e3:7.1f} ms  simulated "
            f"{r['simulated_iteration_time'] * 1e3:7.1f} ms  ratio {r['measured_over_simulated']:.2f}  "
            f"dispatch/action mean {r['dispatch_us']['all']:.0f} us, median {r['dispatch_us_median']:.0f} us  "
            f"host issue {issue_per_iter * 1e3:.1f} ms/iteration")
    summary = {"mode": "cpu", "model": "llama2-tiny", "stages": 4, "microbatches": microbatches,
               "micro_batch_size": micro_batch_size, "seq_len": seq_len, "devices": devices,
               "processes": processes, "steps": steps, "runs": results}
    write_json_atomic(out / ("bench_cpu.json" if processes == 1 else f"bench_cpu_p{processes}.json"), summary)
    return summary


def _cpu_run_here(kw: dict, steps: int, seq_len: int, micro_batch_size: int, microbatches: int,
                  devices: int, log) -> dict:
    request_host_devices(devices)
    from obscura_jax.runtime.placement import place_stages  # lazy (these four): JAX starts after the request
    from obscura_jax.run.run_config import RunConfig
    from obscura_jax.observe.summary import summarize
    from obscura_jax.run.trainer import train

    run = RunConfig(model="llama2-tiny", stages=4, microbatches=microbatches, steps=steps,
                    micro_batch_size=micro_batch_size, seq_len=seq_len, data="synthetic",
                    cost_reps=5, warmup_steps=2, **kw)
    return summarize(train(run, lambda p: place_stages(p, "cpu", devices), log=log))


def _cpu_run_processes(path: Path, kw: dict, steps: int, seq_len: int, micro_batch_size: int,
                       microbatches: int, devices: int, processes: int) -> dict:
    if devices % processes:
        raise UsageError(f"--devices {devices} must be a multiple of --processes {processes}")
    argv = ["train", "--model", "llama2-tiny", "--stages", "4", "--microbatches", str(microbatches),
            "--steps", str(steps), "--micro-batch-size", str(micro_batch_size), "--seq-len", str(seq_len),
            "--data", "synthetic", "--cost-reps", "5", "--warmup-steps", "2", "--no-progress",
            "--devices", "cpu", "--processes", str(processes), "--devices-per-process",
            str(devices // processes), "--json", str(path)]
    for key, value in kw.items():
        argv += [f"--{key.replace('_', '-')}", str(value)]
    proc = subprocess.run([sys.executable, "-m", "obscura_jax", *argv], capture_output=True, text=True,
                          timeout=900)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    return json.loads(path.read_text())


class GpuClockLog:
    """nvidia-smi sampled every 250 ms while it is open (as results/h200/power_cap
    was recorded): SM clock, power, temperature, utilization, throttle reasons."""
    QUERY = ("timestamp,clocks.current.sm,clocks.current.memory,power.draw,temperature.gpu,"
             "utilization.gpu,clocks_event_reasons.active")

    def __init__(self, path: Path):
        self.path = path
        self.proc = subprocess.Popen(["nvidia-smi", f"--query-gpu={self.QUERY}", "--format=csv", "-lms", "250",
                                      "-f", str(path)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()

    def window(self, t0: float, t1: float) -> dict | None:
        return busy_window(self.path, t0, t1)


def busy_window(path: Path, t0: float, t1: float) -> dict | None:
    """Medians over an nvidia-smi CSV's samples between wall times t0 and t1 where the
    GPU was busy (utilization >= 50%), and the throttle reasons seen."""
    if not path.exists():
        return None
    rows = []
    with open(path) as f:
        for row in csv.reader(f, skipinitialspace=True):
            try:
                t = datetime.strptime(row[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
                sm, power, util = float(row[1].split()[0]), float(row[3].split()[0]), float(row[5].split()[0])
            except (ValueError, IndexError):
                continue   # the header, or a sample nvidia-smi could not read
            if t0 <= t <= t1 and util >= 50:
                rows.append((sm, power, row[6].strip()))
    if not rows:
        return None
    return {"busy_samples": len(rows), "sm_clock_mhz": statistics.median(r[0] for r in rows),
            "power_w": statistics.median(r[1] for r in rows), "throttle_reasons": sorted({r[2] for r in rows})}


def gpu_configs(layers: int, seq_len: int, microbatches: int, steps: int, mechanisms: list[str],
                cpu_smoke: bool = False, only=None) -> dict:
    """The GPU runs' `obscura train` flags; `cpu_smoke`: the same runs on llama2-tiny and
    4 emulated CPU devices (checks the GPU mode's plumbing where there is no GPU); the
    balanced ZB-V's partition is planned only where it runs (`only`: the runs asked for)."""
    model = ["--model", "llama2-tiny", "--devices", "cpu:1"] if cpu_smoke else \
        ["--model", "llama2-7b", "--devices", "gpu", "--layers", str(layers), "--compute-dtype", "bfloat16"]
    base = [*model, "--stages", "4", "--microbatches", str(microbatches), "--micro-batch-size", "1",
            "--seq-len", str(seq_len), "--steps", str(steps), "--warmup-steps", "2", "--no-progress"]
    swap = ["--schedule", "obscura", "--adjusted", "1", "--swap-blocks", "2", "--swap-fraction", "0.5"]
    # the head's W at once: its deferred W's pile up on the stage that holds the head (p - 1 under
    # ZB-H1), which then holds the largest peak; at once it costs a head W per I there. Joined:
    # stage 0's backward whole where its W follows its I (schedules.generators.join)
    at_once = ["--head-weight-grad", "at-once"]
    runs = {"1f1b": base + ["--schedule", "1f1b"], "zb_h1": base + ["--schedule", "zb-h1"],
            "zb_h1_head_at_once": base + ["--schedule", "zb-h1"] + at_once,
            "zb_h1_joined": base + ["--schedule", "zb-h1", "--first-weight-grad", "at-once"] + at_once,
            "zb_v": base + ["--schedule", "zb-v"], "zb_v_head_at_once": base + ["--schedule", "zb-v"] + at_once}
    if only is None or "zb_v_balanced" in only:
        part = zb_v_balanced_counts(model[1], None if cpu_smoke else layers, seq_len, microbatches, 4,
                                    None if cpu_smoke else "bfloat16")
        # the order the planner balanced: stage 0's backward joined (schedules.generators.join)
        runs["zb_v_balanced"] = base + ["--schedule", "zb-v", "--partition", part, "--first-weight-grad", "at-once"] + at_once
    for mech in mechanisms:
        runs[f"obscura_swap_{mech}"] = base + swap + ["--swap-mechanism", mech]
    runs["obscura_noswap"] = base + swap + ["--no-swap"]
    runs["recomp_all"] = base + ["--schedule", "recomp", "--adjusted", "all"]   # DAPPLE+ (unit)
    runs["recomp_all_layer"] = base + ["--schedule", "recomp", "--adjusted", "all", "--adjusted-policy", "layer"]
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
              mechanisms: list[str], timeout: float, only: list[str] | None = None, smi_log: bool = False,
              cpu_smoke: bool = False, log=print) -> dict:
    """GPU mode (see the module docstring): the runs, then what they say together.
    Long: one subprocess per run (beside an optional nvidia-smi log), then the comparison they feed."""
    env = dict(os.environ)
    env.setdefault("XLA_PYTHON_CLIENT_MEM_FRACTION", "0.95")
    # The runs share most stage programs: compile them once across the processes.
    env.setdefault("JAX_COMPILATION_CACHE_DIR", "/tmp/obscura_jax_compile_cache")
    results, failures, windows = {}, {}, {}
    configs = gpu_configs(layers, seq_len, microbatches, steps, mechanisms, cpu_smoke, only)
    unknown = sorted(set(only or ()) - set(configs))
    if unknown:
        raise UsageError(f"unknown run(s) {', '.join(unknown)}; runs: {', '.join(configs)}")
    clocks = GpuClockLog(out / "nvidia_smi_250ms.csv") if smi_log else None
    try:
        for label, argv in configs.items():
            if only and label not in only:
                continue
            path = out / f"gpu_{label}.json"
            cmd = [sys.executable, "-m", "obscura_jax", "train", *argv, "--json", str(path)]
            log(f"== {label}: {' '.join(cmd[2:])}")
            t0 = time.time()
            try:
                proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
            except subprocess.TimeoutExpired:
                failures[label] = f"timed out after {timeout:.0f} s"
                log(f"   {failures[label]}")
                continue
            windows[label] = (t0, time.time())
            log(proc.stdout.rstrip())
            if proc.returncode != 0 or not path.exists():
                failures[label] = (proc.stderr.strip().splitlines() or ["exit %d" % proc.returncode])[-1]
                log(f"   failed: {failures[label]}")
                continue
            results[label] = json.loads(path.read_text())
    finally:
        if clocks is not None:
            clocks.close()
    summary = {"mode": "gpu", "model": f"llama2-7b shapes, {layers} layers", "stages": 4,
               "microbatches": microbatches, "seq_len": seq_len, "steps": steps,
               "failures": failures, "runs": {}}
    for label, res in results.items():
        serial = res.get("simulated_serial_time")
        row = {"iteration_time": res["iteration_time"],
               "simulated_iteration_time": res["simulated_iteration_time"],
               "simulated_serial_time": serial,
               "measured_over_serial_simulation": res["iteration_time"] / serial if serial else None,
               "tokens_per_second": res["tokens_per_second"], "swap": res["swap"],
               "dispatch_us": res["dispatch_us"], "costs": res.get("costs"),
               "gpu_clocks": clocks.window(*windows[label]) if clocks is not None else None,
               "breakdown": pipeline_breakdown(res),
               "device_peak_bytes": max((st["device_peak_bytes"] or 0) for st in res["stages"]) or None,
               "stages": [{k: st.get(k) for k in ("units", "pipeline_device", "policy", "param_bytes", "weight_bytes",
                                                 "residual_bytes_per_microbatch", "accounted_peak_bytes",
                                                 "simulated_peak_bytes", "peak_activation_bytes",
                                                 "temp_bytes")}
                          for st in res["stages"]],
               # per pipeline device, the measured timeline's activation fold (a V-shaped run's
               # stages on one device peak at different times)
               "device_activation_peak_bytes": [lane["peak_activation_bytes"] for lane in res["timeline"]["stages"]]
               if res.get("timeline") else None,
               "simulated_peak_sum": sum(st.get("simulated_peak_bytes") or 0 for st in res["stages"]),
               "accounted_peak_sum": sum(st["accounted_peak_bytes"] for st in res["stages"]),
               "memory": memory_row(res)}
        if label.startswith("obscura_swap") and "obscura_noswap" in results:
            row["hidden"] = _hidden_fraction(res, results["obscura_noswap"])
        summary["runs"][label] = row
    write_json_atomic(out / "bench_gpu.json", summary)
    for label, row in summary["runs"].items():
        for line in _gpu_lines(label, row):
            log(line)
    summary["zero_bubble"] = zero_bubble_rows(summary["runs"])
    for label, z in summary["zero_bubble"].items():
        log(f"{label} / 1f1b: largest accounted peak {z['peak_ratio']:.3f}x ({z['peak_bytes'] / 2**30:.2f} vs "
            f"{z['base_peak_bytes'] / 2**30:.2f} GiB, per {z['per']}), iteration {z['time_ratio']:.3f}x")
    write_json_atomic(out / "bench_gpu.json", summary)
    checked = [row["memory"]["within"] for row in summary["runs"].values() if row["memory"]]
    if checked and None not in checked:
        log(f"memory check: measured <= predicted <= 1.05 x measured on every run: {'yes' if all(checked) else 'NO'}")
    return summary


def largest_peak(res: dict) -> tuple[float, str]:
    """(bytes, what was compared) of a summary row's largest accounted peak (weights +
    the ledger's activations and inbox + XLA scratch, the run's own count), per stage
    when each device runs one; per pipeline device when a device runs several (a
    V-shaped run): its stages' weights + the measured timeline's activation peak of
    that device (its stages' ledgers peak at different times) + the largest scratch."""
    stages = res["stages"]
    where = [st.get("pipeline_device", 0) for st in stages]
    if len(set(where)) == len(stages):
        return max(st["accounted_peak_bytes"] for st in stages), "stage"
    per_device = []
    for d, activations in enumerate(res["device_activation_peak_bytes"]):
        mine = [st for st, w in zip(stages, where) if w == d]
        per_device.append(sum(st["weight_bytes"] for st in mine) + activations + max(st["temp_bytes"] for st in mine))
    return max(per_device), "device (weights of its stages + its measured activation peak + scratch)"


def zero_bubble_rows(runs: dict) -> dict:
    """Each zero-bubble run against 1F1B on the same devices: its largest accounted
    peak and its iteration time over 1F1B's."""
    base = runs.get("1f1b")
    if not base or not base.get("stages"):
        return {}
    base_peak, _ = largest_peak(base)
    out = {}
    for label in ("zb_h1", "zb_h1_head_at_once", "zb_h1_joined", "zb_v", "zb_v_head_at_once", "zb_v_balanced"):
        row = runs.get(label)
        if not row or not row.get("stages"):
            continue
        peak, per = largest_peak(row)
        out[label] = {"peak_bytes": peak, "base_peak_bytes": base_peak, "peak_ratio": peak / base_peak, "per": per,
                      "time_ratio": row["iteration_time"] / base["iteration_time"]}
    return out


def memory_row(res: dict) -> dict | None:
    """The run's memory check on its fullest device: predicted (the estimate `train`
    checks against the limit) beside the device's measured peak (memory_stats over
    the whole process); `within` is measured <= predicted <= 1.05 x measured."""
    devices = (res.get("memory") or {}).get("devices") or []
    if not devices:
        return None
    d = max(devices, key=lambda d: d["predicted_bytes"])
    ratio = d.get("predicted_over_measured")
    return {"device": d["device"], "predicted_bytes": d["predicted_bytes"], "phase": d["phase"],
            "measured_peak_bytes": d.get("measured_peak_bytes"), "predicted_over_measured": ratio,
            "within": None if ratio is None else 1.0 <= ratio <= 1.05}


def pipeline_breakdown(res: dict) -> dict | None:
    """Where a one-device run's time goes, from its JSON: the recorded step's forward
    (F) and backward (B, or a split backward's I and W) durations in the pipeline
    against the standalone costs of the same programs, and the time the device ran
    no compute (makespan minus those durations: gaps)."""
    tl, c = res.get("timeline"), res.get("costs")
    if not tl or not c:
        return None
    took = {"F": 0.0, "B": 0.0}
    alone = {"F": 0.0, "B": 0.0}
    ig, wg = c.get("input_grad"), c.get("weight_grad")
    for d, lane in enumerate(tl["stages"]):
        for op in lane["ops"]:
            # a chunked (V-shaped) run lists device lanes whose actions name their model stage
            a = Action.parse(op["action"], None if op["action"][0].isdigit() else d)
            s = a.stage
            rec = c["recompute"][s] if res["stages"][s]["adjusted"] else 0.0
            standalone = {"F": c["fwd"][s], "B": c["bwd"][s] + rec,
                          "I": (ig[s] if ig else c["bwd"][s]) + rec, "W": wg[s] if wg else 0.0}
            kind = a.kind.value
            if kind in standalone:
                bucket = "F" if kind == "F" else "B"
                took[bucket] += op["end"] - op["start"]
                alone[bucket] += standalone[kind]
    compute = took["F"] + took["B"]
    return {"F_pipeline_over_standalone": took["F"] / alone["F"] if alone["F"] else None,
            "B_pipeline_over_standalone": took["B"] / alone["B"] if alone["B"] else None,
            "compute_seconds": compute, "makespan": tl["makespan"], "idle_seconds": tl["makespan"] - compute}


def _gpu_lines(label: str, row: dict) -> list[str]:
    sw, d = row["swap"], row["dispatch_us"]
    hid = (row.get("hidden") or {}).get("fraction_hidden")
    ratio = row["measured_over_serial_simulation"]
    lines = [f"{label:22s} measured {row['iteration_time'] * 1e3:8.1f} ms / one-GPU serial simulation "
             f"{(row['simulated_serial_time'] or 0) * 1e3:8.1f} ms = {ratio or 0:.3f}   device peak "
             f"{(row['device_peak_bytes'] or 0) / 2**30:6.1f} GiB  sum sim peaks {row['simulated_peak_sum'] / 2**30:6.1f} GiB",
             f"{'':22s} host dispatch per action: median {d.get('all_median') or 0:,.0f} us, mean "
             f"{d.get('all') or 0:,.0f} us, p10 {d.get('all_p10') or 0:,.0f} us (F {d.get('F') or 0:,.0f}, "
             f"B {d.get('B') or 0:,.0f}" + (f", I {d['I']:,.0f}, W {d['W']:,.0f}" if d.get("I") else "") + ")"]
    mem = row.get("memory")
    if mem:
        peak, ratio = mem.get("measured_peak_bytes"), mem.get("predicted_over_measured")
        lines.append(f"{'':22s} memory {mem['device']}: predicted {mem['predicted_bytes'] / 2**30:.2f} GiB "
                     f"({mem['phase']}) / measured peak " + (f"{peak / 2**30:.2f} GiB = {ratio:.3f}"
                                                           f"{'' if mem['within'] else '  OUTSIDE [1, 1.05]'}"
                                                           if peak else "unknown"))
    if sw.get("bytes_out"):
        lines.append(f"{'':22s} swap {sw.get('standalone_gbps_out') or 0:.1f}/{sw.get('standalone_gbps_in') or 0:.1f}"
                     f" GB/s (in-run {sw.get('measured_gbps_out') or 0:.1f}/{sw.get('measured_gbps_in') or 0:.1f}, "
                     f"overlap {sw.get('overlap_with_compute') or 0:.0%})" + (f"  hidden {hid:.0%}" if hid is not None else ""))
    if row.get("breakdown"):
        b = row["breakdown"]
        lines.append(f"{'':22s} recorded step: F {b['F_pipeline_over_standalone'] or 0:.3f}x, B "
                     f"{b['B_pipeline_over_standalone'] or 0:.3f}x their standalone costs; makespan "
                     f"{b['makespan'] * 1e3:.1f} ms = compute {b['compute_seconds'] * 1e3:.1f} ms + no compute "
                     f"{b['idle_seconds'] * 1e3:.1f} ms")
    if row.get("gpu_clocks"):
        g = row["gpu_clocks"]
        lines.append(f"{'':22s} GPU while busy: SM clock median {g['sm_clock_mhz']:.0f} MHz, power "
                     f"{g['power_w']:.0f} W, throttle reasons {', '.join(g['throttle_reasons'])} "
                     f"({g['busy_samples']} samples)")
    return lines
