"""Your own Flax NNX model through the whole of Obscura on the command line: described,
profiled, planned and trained, and equal to its unpipelined loss.

examples/geglu.py registers a Gemma-like model with a GeGLU MLP ("geglu-tiny") whose
op names (sdpa, ffn_glu, ...) are in no built-in family. Every command finds it
through `--model-module examples/geglu.py`:

    obscura model-info geglu-tiny --seq-len 32 --model-module examples/geglu.py
    obscura profile --model geglu-tiny --seq-len 32 --micro-batch 2 --json prof.json ...
    obscura plan --profile PROFILE --stages 4 --microbatches 4 --memory-limit LIMIT ...
    obscura train --plan plan.json --devices cpu:4 --check ...

The profile offers the family's cmb preset for recompute (whole-unit recompute is
always there), which keeps it quick. The plans are made from PROFILE =
examples/geglu-tiny_profile.json, the same profile command's output committed
(measured on a CPU with --reps 5; remake it with

    obscura profile --model geglu-tiny --seq-len 32 --micro-batch 2 --reps 5 \
        --policy-ops pre_attn_norm,pre_ffn_norm,out_norm,ffn_gelu,ffn_glu \
        --json examples/geglu-tiny_profile.json --model-module examples/geglu.py

and check that this script still passes): times measured here, on a busy machine
above all, can rank a baseline that adjusts nothing faster, and this example is
about a plan that recomputes. LIMIT is below what plain 1F1B needs (read from a
1F1B-only plan with room to spare, `--no-families`), so whatever schedule family the
planner picks (each at its best plan: obscura, zb-h1, interleaved, ...) recomputes
ops of this model on some stage; `train --plan` takes the model, sequence length and
micro-batch from the plan, and `--check` trains the same model unpipelined beside it.

    python examples/custom_model.py [--out DIR]

Exits 0 only if every command succeeds, the op names are the model's own (in
model-info and in this machine's profile), the plan recomputes on some stage, and
the pipelined losses equal the unpipelined ones (rtol 1e-5).
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import geglu  # the op names and presets this model registers

MODULE = str(Path(geglu.__file__).resolve())
PROFILE = Path(geglu.__file__).resolve().parent / "geglu-tiny_profile.json"    # committed: see above


def obscura(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    print("$ obscura " + " ".join(args) + " --model-module examples/geglu.py", flush=True)
    r = subprocess.run([sys.executable, "-m", "obscura_jax", *args, "--model-module", MODULE],
                       capture_output=True, text=True, timeout=timeout)
    print(r.stdout.rstrip() + (f"\n{r.stderr.rstrip()}" if r.returncode else ""), flush=True)
    if r.returncode:
        raise SystemExit(f"FAILED: obscura {args[0]} exited {r.returncode}")
    return r


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="figures_out/examples/geglu", help="where the JSON files go")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    info, prof, plan, run = (out / n for n in ("info.json", "profile.json", "plan.json", "run.json"))

    obscura("model-info", "geglu-tiny", "--seq-len", "32", "--json", str(info))
    ops = [op for kind in json.loads(info.read_text())["unit_kinds"].values() for op in kind["ops"]]
    own = ops == [o for kind in geglu.OPS.values() for o in kind]
    obscura("profile", "--model", "geglu-tiny", "--seq-len", "32", "--micro-batch", "2", "--reps", "1",
            "--policy-ops", ",".join(geglu.PRESETS["cmb"]), "--json", str(prof))
    measured = json.loads(prof.read_text())["units"]
    own = own and [op for u in measured.values() for op in u["ops"]] == \
        [op for u in json.loads(PROFILE.read_text())["units"].values() for op in u["ops"]]
    plan_args = ["plan", "--profile", str(PROFILE), "--stages", "4", "--microbatches", "4", "--json", str(plan)]
    obscura(*plan_args, "--memory-limit", "1TiB", "--no-families")
    need_1f1b = max(st["predicted_peak_bytes"] for st in json.loads(plan.read_text())["stages"])
    obscura(*plan_args, "--memory-limit", str(int(0.8 * need_1f1b)))   # below 1F1B's need
    planned = json.loads(plan.read_text())
    recomputing = [s for s, st in enumerate(planned["stages"]) if st["recompute"]]
    obscura("train", "--plan", str(plan), "--devices", "cpu:4", "--steps", "2", "--cost-reps", "1",
            "--no-progress", "--check", "--json", str(run))
    res = json.loads(run.read_text())
    ok = own and bool(recomputing) and res["check"]["equal"]
    print(f"op names its own: {own}; plan {planned['schedule']} recomputing on stages {recomputing}; losses "
          f"equal to the unpipelined model: {res['check']['equal']} -> {'OK' if ok else 'FAILED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
