"""Wall time of the two slowest commands (BENCHMARKS.md "Command speed"), as `obscura` runs them.

    python scripts/bench/bench_cli_speed.py gantt [--vector] [--stages P --microbatches M]
                                                         simulate --stages 32 --microbatches 512 --gantt
    python scripts/bench/bench_cli_speed.py plan               plan p=16 m=128 at 20 GiB and 14 GiB (13B profile)

`gantt` times the whole command (generate, simulate, draw PNG + SVG) with the
rasterised chart, and with --vector the same chart drawn bar by bar (the old way:
schedules.formats.gantt.RASTER_OPS raised above the op count) in the same run, with the
file sizes. `plan` times `obscura plan` on results/h200/profile_llama2-13b.json.
Prints one line per figure; CPU seconds too, since the machine may be shared.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import schedules.formats.gantt as gantt  # noqa: E402
from obscura_jax.cli.main import main, run_command  # noqa: E402


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def timed(label: str, argv: list[str]) -> None:
    t0, c0 = time.perf_counter(), _cpu()
    with contextlib.redirect_stdout(io.StringIO()) as out:
        rc = main(argv)
    wall, cpu = time.perf_counter() - t0, _cpu() - c0
    tail = out.getvalue().strip().splitlines()[-1:] or [""]
    print(f"{label}: {wall:.1f} s wall, {cpu:.1f} s CPU, exit {rc}; {tail[0][:120]}", flush=True)


def bench_gantt(vector: bool, p: int, m: int) -> None:
    argv = ["simulate", "--schedule", "1f1b", "--stages", str(p), "--microbatches", str(m)]
    with tempfile.TemporaryDirectory() as tmp:
        timed(f"simulate p={p} m={m}, no chart", argv)
        png = Path(tmp) / "g.png"
        timed(f"simulate p={p} m={m} --gantt (raster)", argv + ["--gantt", str(png)])
        print(f"  PNG {png.stat().st_size / 1e6:.2f} MB, SVG {png.with_suffix('.svg').stat().st_size / 1e6:.2f} MB")
        if vector:
            gantt.RASTER_OPS = 10 ** 9
            timed(f"simulate p={p} m={m} --gantt (vector, bar by bar)", argv + ["--gantt", str(png)])
            print(f"  PNG {png.stat().st_size / 1e6:.2f} MB, "
                  f"SVG {png.with_suffix('.svg').stat().st_size / 1e6:.2f} MB")


def bench_plan() -> None:
    prof = str(ROOT / "results/h200/profile_llama2-13b.json")
    for limit in ("14GiB", "20GiB"):
        timed(f"plan 13B p=16 m=128 {limit}", ["plan", "--profile", prof, "--stages", "16",
                                               "--microbatches", "128", "--memory-limit", limit])


def body() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("what", choices=("gantt", "plan"))
    ap.add_argument("--vector", action="store_true", help="also time the bar-by-bar chart (minutes)")
    ap.add_argument("--stages", type=int, default=32)
    ap.add_argument("--microbatches", type=int, default=512)
    args = ap.parse_args()
    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}; "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    bench_gantt(args.vector, args.stages, args.microbatches) if args.what == "gantt" else bench_plan()
    return 0


if __name__ == "__main__":
    sys.exit(run_command("bench_cli_speed", body))
