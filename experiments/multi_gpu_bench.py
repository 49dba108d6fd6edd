"""Measured pipelines on N GPUs (scripts/bench/bench_multi_gpu.py is the entry point; the
analysis of the runs is experiments/multi_gpu_report.py).

Bench shape: llama2-7b shapes, 4 layers per stage (~1B params a stage; p = N stages,
one per GPU), seq 4096, micro-batch 1, m = 2p and 4p. Three steps:

    plan (on a CPU machine with OR-Tools)        run (the N-GPU machine)          report
    analytic H200 profile of the shape  ->   per m: 1F1B, DAPPLE+, the plan,  ->  table.md
    F/B scaled to a one-GPU run of it        each --processes N and one           bench_multi_gpu.json
    -> plans/plan_m<m>.json (carried)        process for all GPUs; then a
                                             swap pair (p-1 GPUs swapping)

Every run is an `obscura train` subprocess (its own memory_stats peaks, a bounded
timeout) writing runs/<label>.json and gantt/<label>.png under --out. `--cpu-smoke`
runs the same steps on llama2-tiny, 4 emulated CPU devices and local processes.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

from obscura_jax.errors import UsageError
from schedules.formats.jsonio import write_json_atomic
from schedules.sizes import format_bytes

LAYERS_PER_STAGE = 4          # llama2-7b: 4 layers ~ 0.8B params + embed/head on the end stages
SCHEDULES = ("1f1b", "dapple_plus", "obscura")
LAYOUTS = ("proc", "one")     # one process per GPU (--processes N); one process for all GPUs
ONE_GPU_REFERENCE = "results/h200/engine_v2"   # the same shape at p=4 on one GPU (bench_engine.py)


@dataclass(frozen=True)
class BenchShape:
    """What one bench runs on: p stages (= GPUs or emulated CPU devices)."""
    stages: int
    model: str = "llama2-7b"
    layers: int | None = None          # None: LAYERS_PER_STAGE x stages
    seq_len: int = 4096
    factors: tuple[int, ...] = (2, 4)  # m = factor x p
    cpu_smoke: bool = False
    processes: int | None = None       # the multi-process layout's process count (None: one per stage)
    steps: int = 5
    warmup_steps: int = 2
    cost_reps: int = 3

    def __post_init__(self) -> None:
        if self.stages < 2:
            raise UsageError(f"--gpus must be at least 2, got {self.stages}")
        procs = self.num_processes
        if procs < 2 or self.stages % procs:
            raise UsageError(f"--processes {procs} must be at least 2 and divide the {self.stages} stages")
        if any(f < 1 for f in self.factors):
            raise UsageError(f"micro-batch factors must be positive, got {list(self.factors)}")

    @property
    def num_layers(self) -> int:
        return self.layers or LAYERS_PER_STAGE * self.stages

    @property
    def num_processes(self) -> int:
        return self.processes or self.stages

    @property
    def microbatches(self) -> tuple[int, ...]:
        return tuple(f * self.stages for f in self.factors)


def smoke_shape(processes: int = 2, factors: tuple[int, ...] = (2,)) -> BenchShape:
    """The --cpu-smoke shape: llama2-tiny (4 layers, one a stage), 4 emulated CPU devices."""
    return BenchShape(stages=4, model="llama2-tiny", layers=4, seq_len=32, factors=factors, cpu_smoke=True,
                      processes=processes, steps=3, warmup_steps=1, cost_reps=1)


# ---- plan step (CPU) --------------------------------------------------------------------

def one_gpu_scales(reference: Path, profile) -> dict:
    """Scale factors that turn the analytic profile's F and B times into those measured
    on one H200 for the same shape (reference: bench_engine.py's gpu_1f1b.json, 4
    stages; its summed stage costs = the whole model's), and its standalone host GB/s."""
    from planner.profile import derive_profile  # lazy (planner.*): they load JAX

    ref = json.loads((reference / "gpu_1f1b.json").read_text())
    cfg_layers = sum(1 for n in ref["stages"] for u in n["unit_names"] if u.startswith("attn"))
    prof = derive_profile(profile, cfg_layers)
    fwd = sum(prof.unit(k).fwd_time for k in prof.kinds)
    bwd = sum(prof.unit(k).bwd_time for k in prof.kinds)
    scales = {"fwd": sum(ref["costs"]["fwd"]) / fwd, "bwd": sum(ref["costs"]["bwd"]) / bwd,
              "reference": str(reference / "gpu_1f1b.json"), "reference_layers": cfg_layers}
    swap_path = reference / "gpu_obscura_swap_device_put.json"
    if swap_path.exists():
        sw = json.loads(swap_path.read_text())["swap"]
        gbps = [g for g in (sw.get("standalone_gbps_out"), sw.get("standalone_gbps_in")) if g]
        scales["host_bandwidth"] = min(gbps) * 1e9 if gbps else None
    return scales


def scaled_profile(profile, scales: dict):
    """`profile` with forward-side times (F, recompute) x scales["fwd"] and B x
    scales["bwd"]; the host bandwidth replaced when scales has one."""
    fs, bs = scales["fwd"], scales["bwd"]
    units = []
    for kind, u in profile.units:
        ops = tuple((n, replace(o, fwd_time=o.fwd_time * fs)) for n, o in u.ops)
        full = None if u.full_recompute_time is None else u.full_recompute_time * fs
        units.append((kind, replace(u, fwd_time=u.fwd_time * fs, bwd_time=u.bwd_time * bs, ops=ops,
                                    full_recompute_time=full)))
    note = f"{profile.device} F x{fs:.3f}, B x{bs:.3f} from {scales['reference']}"
    out = replace(profile, units=tuple(units), device=note)
    if scales.get("host_bandwidth"):
        out = replace(out, host_bandwidth=scales["host_bandwidth"])
    return out


def bench_profile(shape: BenchShape, reference: Path | None):
    """The profile the plans are made from: analytic (H200 rates) at the bench shape,
    scaled to the one-GPU reference run when there is one (not in --cpu-smoke)."""
    import models  # lazy (these three): models and the planner load JAX
    from planner.analytic import analytic_profile
    from planner.profile import derive_profile

    base = analytic_profile(models.get_config(shape.model), shape.seq_len, 1, "H200")
    scales = one_gpu_scales(reference, base) if reference is not None and not shape.cpu_smoke else None
    prof = scaled_profile(base, scales) if scales else base
    if shape.num_layers != prof.num_layers:
        prof = derive_profile(prof, shape.num_layers)
    return prof, scales


def auto_memory_limit(profile, stages: int, microbatches: int) -> int:
    """A limit that forces recompute on the early stages: halfway between the 1F1B
    peaks (no recompute, even partition) of stages p/2 - 1 and p/2, so stages
    0..p/2-1 do not fit 1F1B and the later ones do."""
    import models  # lazy (both): models and the planner load JAX
    from planner.identify import stage_peak_1f1b

    even = models.even_partition(profile.num_units, stages)
    peaks = [stage_peak_1f1b(profile, tuple(units), s, stages, microbatches, frozenset())
             for s, units in enumerate(even)]
    s = stages // 2
    return int((peaks[s - 1] + peaks[s]) / 2)


def make_plans(shape: BenchShape, out: Path, memory_limit: str | None = None,
               reference: Path | None = None, families: bool = False, log=print) -> dict:
    """The plan step: plans/plan_m<m>.json for every m, and plans/plans.json (limits,
    predictions, the profile's scaling). memory_limit: a size ("20GiB") for every m,
    or None for auto_memory_limit. families: let the planner pick Obscura on other
    schedule families too (interleaved, ZB-H1); off, the plan is the paper's Obscura
    on 1F1B, the configuration the paper compares with DAPPLE+."""
    from planner.errors import InfeasibleError  # lazy (these three): the planner loads JAX and OR-Tools
    from planner.plan import plan_search, save_plan
    from planner.profile import save_profile

    prof, scales = bench_profile(shape, reference)
    (out / "plans").mkdir(parents=True, exist_ok=True)
    save_profile(prof, out / "plans" / "profile.json")
    summary = {"model": prof.model, "layers": prof.num_layers, "seq_len": prof.seq_len, "device": prof.device,
               "scales": scales, "families": families, "plans": {}}
    for m in shape.microbatches:
        limit = memory_limit or auto_memory_limit(prof, shape.stages, m)
        try:
            res = plan_search(prof, shape.stages, m, limit, profile_path=out / "plans" / "profile.json",
                              families=families)
        except InfeasibleError as e:
            if memory_limit or not e.smallest_feasible_limit:
                raise
            # auto: the spread of 1F1B peaks is below what the stages need (a tiny model)
            log(f"m={m}: {e}; planning at that limit")
            res = plan_search(prof, shape.stages, m, e.smallest_feasible_limit,
                              profile_path=out / "plans" / "profile.json", families=families)
        path = out / "plans" / f"plan_m{m}.json"
        save_plan(res.plan, path)
        plan = res.plan
        base = dict(plan.baselines)
        summary["plans"][str(m)] = {
            "path": str(path), "schedule": plan.schedule, "memory_limit": plan.memory_limit, "adjusted": list(plan.adjusted_stages),
            "swap_blocks": [st.swap_blocks for st in plan.stages],
            "recompute": [list(st.recompute) for st in plan.stages],
            "predicted_iteration_time": plan.predicted_iteration_time, "baselines": base,
            "predicted_speedup_vs_dapple_plus": (base["dapple_plus"] / plan.predicted_iteration_time
                                                 if base.get("dapple_plus") else None)}
        p = summary["plans"][str(m)]
        log(f"m={m}: limit {format_bytes(plan.memory_limit, 2)}, adjusted {p['adjusted'] or 'none'}, swap blocks "
            f"{p['swap_blocks']}; predicted obscura {plan.predicted_iteration_time:.4g} s, DAPPLE+ "
            f"{base.get('dapple_plus') or float('nan'):.4g} s, speedup {p['predicted_speedup_vs_dapple_plus'] or 0:.3f}x")
    write_json_atomic(out / "plans" / "plans.json", summary)
    return summary


# ---- run step (GPU machine, or CPU smoke) -----------------------------------------------

def layout_args(shape: BenchShape, layout: str) -> list[str]:
    """`obscura train` flags for one process layout."""
    if shape.cpu_smoke:
        if layout == "proc":
            return ["--processes", str(shape.num_processes), "--devices", "cpu",
                    "--devices-per-process", str(shape.stages // shape.num_processes)]
        return ["--devices", f"cpu:{shape.stages}"]
    if layout == "proc":
        return ["--processes", str(shape.num_processes), "--devices", "gpu",
                "--devices-per-process", str(shape.stages // shape.num_processes)]
    return ["--devices", "gpu"]


def run_configs(shape: BenchShape, plans: Path) -> dict[str, list[str]]:
    """label -> `obscura train` argv (no --json/--gantt), in the order they run: per m
    the three schedules in both layouts, then the swap pair (multi-process, first m)."""
    common = ["--steps", str(shape.steps), "--warmup-steps", str(shape.warmup_steps),
              "--cost-reps", str(shape.cost_reps), "--no-progress"]
    p = shape.stages
    runs = {}
    for m in shape.microbatches:
        model = ["--model", shape.model, "--layers", str(shape.num_layers), "--seq-len", str(shape.seq_len),
                 "--micro-batch-size", "1", "--stages", str(p), "--microbatches", str(m)]
        sched = {"1f1b": model + ["--schedule", "1f1b"],
                 "dapple_plus": model + ["--schedule", "recomp", "--adjusted", "all", "--adjusted-policy", "full"],
                 "obscura": ["--plan", str(plans / f"plan_m{m}.json")]}
        for layout in LAYOUTS:
            for name in SCHEDULES:
                runs[f"m{m}_{layout}_{name}"] = sched[name] + layout_args(shape, layout) + common
    m = shape.microbatches[0]
    swap = ["--model", shape.model, "--layers", str(shape.num_layers), "--seq-len", str(shape.seq_len),
            "--micro-batch-size", "1", "--stages", str(p), "--microbatches", str(m), "--schedule", "obscura",
            "--adjusted", str(p - 2), "--swap-blocks", "1", "--swap-fraction", "0.5"]
    runs[f"m{m}_proc_swap"] = swap + layout_args(shape, "proc") + common
    runs[f"m{m}_proc_noswap"] = swap + ["--no-swap"] + layout_args(shape, "proc") + common
    return runs


def run_env() -> dict:
    env = dict(os.environ)
    env.setdefault("XLA_PYTHON_CLIENT_MEM_FRACTION", "0.95")
    env.setdefault("JAX_COMPILATION_CACHE_DIR", "/tmp/obscura_jax_compile_cache")  # shared by the runs
    return env


def run_all(configs: dict[str, list[str]], out: Path, timeout: float, deadline: float | None = None,
            only: list[str] | None = None, log=print) -> dict:
    """Run each config as `python -m obscura_jax train ... --json runs/<label>.json --gantt
    gantt/<label>.png`. A run that fails or times out is recorded and the next one runs;
    with `deadline` (seconds from now) a run that would not finish in time (judged by
    the longest run so far) is skipped. Returns {label: status line}."""
    unknown = sorted(set(only or ()) - set(configs))
    if unknown:
        raise UsageError(f"unknown run(s) {', '.join(unknown)}; runs: {', '.join(configs)}")
    (out / "runs").mkdir(parents=True, exist_ok=True)
    (out / "gantt").mkdir(parents=True, exist_ok=True)
    start, longest, status = time.monotonic(), 0.0, {}
    for label, argv in configs.items():
        if only and label not in only:
            continue
        left = None if deadline is None else deadline - (time.monotonic() - start)
        if left is not None and left < max(longest, 1.0):
            status[label] = f"skipped: {left:.0f} s left of the deadline, the longest run took {longest:.0f} s"
            log(f"== {label}: {status[label]}")
            continue
        path = out / "runs" / f"{label}.json"
        cmd = [sys.executable, "-m", "obscura_jax", "train", *argv, "--json", str(path),
               "--gantt", str(out / "gantt" / f"{label}.png")]
        log(f"== {label}: {' '.join(cmd[2:])}")
        limit = timeout if left is None else min(timeout, left)
        t0 = time.monotonic()
        rc, stdout, stderr = run_bounded(cmd, limit)
        took = time.monotonic() - t0
        longest = max(longest, took)
        log(stdout.rstrip())
        if rc is None:
            status[label] = f"timed out after {limit:.0f} s"
        elif rc != 0 or not path.exists():
            lines = (stderr.strip() or stdout.strip()).splitlines() or [f"exit {rc}"]
            status[label] = f"failed (exit {rc}): {lines[-1]}"
        else:
            status[label] = f"ok in {took:.0f} s"
        log(f"   {status[label]}")
    return status


def run_bounded(cmd: list[str], timeout: float) -> tuple[int | None, str, str]:
    """(exit code or None on timeout, stdout, stderr) of `cmd` in its own process group,
    the whole group killed at the timeout (a launcher's children die with it too)."""
    proc = subprocess.Popen(cmd, env=run_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
        return proc.returncode, stdout, stderr
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        stdout, stderr = proc.communicate()
        return None, stdout, stderr


def copy_plans(src: Path, dst: Path) -> None:
    """The plan step's files (carried to the GPU machine) into this run's --out."""
    dst.mkdir(parents=True, exist_ok=True)
    for path in sorted(src.glob("*.json")):
        (dst / path.name).write_bytes(path.read_bytes())
