"""Every schedule family on every (stages, data, tensor) layout, through the CLI with
its defaults (measured costs, measured timeline), each run checked against the
unpipelined single-device model (`obscura train --check`: losses and final params).
On 8 emulated CPU devices in one process (cli.main in-process, so compiled stage
programs are shared between runs); or, with `--processes 2`, each run on 2 processes x
4 devices (`obscura train --processes 2`, one launch per run, bounded by a timeout),
with the data axis across the processes where D is even (`--data-across-processes`)
and whole stage meshes per process otherwise. Prints one line per run; exit 1 if any
run is not equal.

    python scripts/layouts/layout_matrix.py --model llama2-tiny [--layouts "2,2,2;4,2,1"] [--processes 2] [--out DIR]
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path

LAYOUTS = "2,2,2;4,2,1;2,1,4;1,2,4;4,1,2"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="llama2-tiny")
    ap.add_argument("--layouts", default=LAYOUTS, help="stages,data,tensor;... (default: the five of docs/multiprocess.md's stage meshes)")
    ap.add_argument("--schedules", default=None, help="comma list (default: every family)")
    ap.add_argument("--out", default=None, help="write DIR/layout_matrix_MODEL.json")
    ap.add_argument("--processes", type=int, default=1, choices=(1, 2))
    ap.add_argument("--timeout", type=float, default=900, help="seconds per launch (--processes 2)")
    args = ap.parse_args()
    os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
    from obscura_jax.cli.main import main as cli   # lazy: JAX starts after XLA_FLAGS
    from schedules.generators import SCHEDULES

    layouts = [tuple(int(v) for v in part.split(",")) for part in args.layouts.split(";")]
    families = args.schedules.split(",") if args.schedules else sorted(SCHEDULES)
    rows = []
    for p, d, t in layouts:
        for name in families:
            argv = ["train", "--model", args.model, "--schedule", name, "--stages", str(p),
                    "--data-parallel", str(d), "--tensor-parallel", str(t), "--devices", f"cpu:{p * d * t}",
                    "--microbatches", "4", "--micro-batch-size", "2", "--seq-len", "16", "--steps", "2",
                    "--cost-reps", "1", "--no-progress", "--check"]
            start = time.perf_counter()
            if args.processes > 1:
                argv[argv.index("--devices") + 1] = "cpu"
                argv += ["--processes", "2", "--devices-per-process", str(p * d * t // 2)]
                if d % 2 == 0:
                    argv.append("--data-across-processes")
                rc, out = _launch(argv, args.timeout)
            else:
                buf = io.StringIO()
                with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
                    try:
                        rc = cli(argv)
                    except SystemExit as e:
                        rc = e.code
                out = buf.getvalue()
            check = next((ln[ln.index("check vs"):] for ln in out.splitlines() if "check vs unpipelined" in ln), "")
            equal = rc == 0 and "(equal at" in check
            row = {"stages": p, "data": d, "tensor": t, "schedule": name, "processes": args.processes,
                   "exit": rc, "equal": equal,
                   "seconds": round(time.perf_counter() - start, 1), "check": check,
                   "error": "" if equal else out.strip().splitlines()[-1][:200] if out.strip() else ""}
            rows.append(row)
            print(f"{args.model} ({p},{d},{t}) {name:24s} exit {rc} {'equal' if equal else 'NOT EQUAL'} "
                  f"{row['seconds']:6.1f}s {check[len('check vs unpipelined model: '):] or row['error']}",
                  flush=True)
    bad = [r for r in rows if not r["equal"]]
    print(f"{args.model}: {len(rows) - len(bad)} of {len(rows)} runs equal the unpipelined model")
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        suffix = "" if args.processes == 1 else f"_{args.processes}proc"
        (Path(args.out) / f"layout_matrix_{args.model}{suffix}.json").write_text(json.dumps(rows, indent=1) + "\n")
    return 1 if bad else 0


def _launch(argv: list[str], timeout: float) -> tuple[int, str]:
    """`obscura argv` in its own process group; killed with it after `timeout` s."""
    proc = subprocess.Popen([sys.executable, "-m", "obscura_jax", *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
        return proc.returncode, out
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        out, _ = proc.communicate()
        return 124, out + f"\ntimed out after {timeout:.0f} s"


if __name__ == "__main__":
    sys.exit(main())
