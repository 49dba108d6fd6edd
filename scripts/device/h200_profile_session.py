"""One GPU run (docs/reproduction.md, inputs): re-profile llama2-13b and gpt3-13b with the current
profiler (steady-state timing, the layer-granular recompute priced) and, in the same
run, the layer-recompute yardstick (experiments.layer_yardstick: 5 Llama-2-13B
layers, forward and backward as separate programs, every named op saved vs one
jax.checkpoint per layer), with nvidia-smi logging clocks and power beside it.

    PYTHONPATH=$PWD python3 scripts/device/h200_profile_session.py --out $OUT        # H200, ~5 min
    python scripts/device/h200_profile_session.py --cpu-smoke --out /tmp/smoke       # llama2-tiny, CPU

Writes under --out: profile_llama2-13b.json, profile_gpt3-13b.json (obscura-profile/1),
layer_yardstick.json, nvidia_smi.csv (when nvidia-smi exists), session.json (versions,
seconds, the profile's layer recompute against the yardstick's) and prints the comparison.
"""
from __future__ import annotations

import argparse
import json
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

SMI_QUERY = ("timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,utilization.gpu,"
             "clocks_throttle_reasons.active")


def _settings(smoke: bool) -> dict:
    if smoke:
        return {"models": ("llama2-tiny",), "seq_len": 64, "micro_batch": 2, "reps": 1,
                "policy_ops": ["--policy-ops", "attn_core,mlp_act"],   # fewer programs to compile
                "yardstick_model": "llama2-tiny", "yardstick_layers": 2}
    return {"models": ("llama2-13b", "gpt3-13b"), "seq_len": 4096, "micro_batch": 1, "reps": 3,
            "policy_ops": [], "yardstick_model": "llama2-13b", "yardstick_layers": 5}


def _start_smi(out: Path):
    if shutil.which("nvidia-smi") is None:
        return None, None
    log = open(out / "nvidia_smi.csv", "w")
    proc = subprocess.Popen(["nvidia-smi", f"--query-gpu={SMI_QUERY}", "--format=csv", "-lms", "250"],
                            stdout=log, stderr=subprocess.STDOUT)
    return proc, log


def _stop_smi(proc, log) -> None:
    if proc is not None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def run_session(out: Path, smoke: bool) -> dict:
    """Profiles, then the yardstick; returns session.json's content."""
    # lazy: `obscura profile` must set up the devices before JAX starts
    from obscura_jax.cli.main import main as obscura
    import jax
    import models
    from experiments.layer_yardstick import layer_yardstick
    from obscura_jax.observe.measure import CostTiming
    from planner.profile import load_profile

    cfg = _settings(smoke)
    session = {"jax": jax.__version__, "python": platform.python_version(), "smoke": smoke, "steps": {}}
    for model in cfg["models"]:
        t0 = time.perf_counter()
        path = out / f"profile_{model}.json"
        args = ["profile", "--model", model, "--seq-len", str(cfg["seq_len"]), "--micro-batch",
                str(cfg["micro_batch"]), "--reps", str(cfg["reps"]), "--json", str(path), *cfg["policy_ops"]]
        print("$ obscura " + " ".join(args), flush=True)
        if obscura(args) != 0:
            raise SystemExit(f"obscura profile --model {model} failed")
        session["steps"][f"profile {model}"] = {"seconds": time.perf_counter() - t0, "command": args}
    t0 = time.perf_counter()
    device = jax.devices()[0]   # after the profiles: `obscura profile` sets up the devices first
    session["device"] = str(getattr(device, "device_kind", device.platform))
    ymodel = models.get_config(cfg["yardstick_model"])
    timing = CostTiming.for_device(device, 3)
    yard = layer_yardstick(ymodel, cfg["yardstick_layers"], cfg["seq_len"], cfg["micro_batch"], device, timing)
    (out / "layer_yardstick.json").write_text(json.dumps(yard, indent=1) + "\n")
    session["steps"]["yardstick"] = {"seconds": time.perf_counter() - t0}
    prof = load_profile(out / f"profile_{cfg['yardstick_model']}.json")
    per_layer = yard["recompute_per_layer_s"]
    session["layer_recompute"] = {
        "profile_s": prof.layer_recompute_time, "yardstick_per_layer_s": per_layer,
        "profile_over_yardstick": (prof.layer_recompute_time / per_layer
                                   if prof.layer_recompute_time is not None and per_layer > 0 else None)}
    v = yard["variants"]
    print(f"yardstick {ymodel.name} x{yard['layers']} layers: fwd {v['saved']['fwd_s'] * 1e3:.2f} ms, "
          f"bwd saved {v['saved']['bwd_s'] * 1e3:.2f} ms, bwd layer-checkpointed {v['layer']['bwd_s'] * 1e3:.2f} ms "
          f"-> recompute {yard['recompute_s'] * 1e3:.2f} ms ({yard['recompute_share_of_fwd']:.0%} of the forward)")
    lr = session["layer_recompute"]
    if lr["profile_over_yardstick"] is not None:
        print(f"profile layer_recompute_time {lr['profile_s'] * 1e3:.3f} ms vs yardstick {per_layer * 1e3:.3f} ms "
              f"per layer: ratio {lr['profile_over_yardstick']:.3f} (target within 10%)")
    return session


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, type=Path, help="output folder")
    ap.add_argument("--cpu-smoke", action="store_true", help="tiny models at seq 64 (a quick check on CPU)")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    proc, log = _start_smi(args.out)
    t0 = time.perf_counter()
    try:
        session = run_session(args.out, args.cpu_smoke)
    finally:
        _stop_smi(proc, log)
    session["seconds"] = time.perf_counter() - t0
    (args.out / "session.json").write_text(json.dumps(session, indent=1) + "\n")
    print(f"session {session['seconds']:.0f} s; wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
