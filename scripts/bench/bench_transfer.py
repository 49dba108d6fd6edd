#!/usr/bin/env python
"""Cost of one stage-to-stage transfer on CPU: in one process (2 emulated devices)
vs across two local processes (JAX's cross-process device_put); logic in
experiments.transfer_benchmark.

    python scripts/bench/bench_transfer.py --out results/transfer_cpu
"""
import argparse
import json
import os
import sys
from pathlib import Path

from obscura_jax.cli.main import run_command
from obscura_jax.processes.launch import ENV_NUM, process_spec
from obscura_jax.processes.supervise import launch_local
from schedules.formats.jsonio import write_json_atomic


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="folder for bench_transfer.json")
    ap.add_argument("--reps", type=int, default=20, help="timed transfers per size (median)")
    args = ap.parse_args(argv)
    if os.environ.get(ENV_NUM):
        return run_command("bench_transfer", lambda: child(args))
    return run_command("bench_transfer", lambda: bench(args))


def child(args) -> int:
    """One of the two processes: time the cross-process transfers; process 0 writes them."""
    from obscura_jax.processes.cross_process import CrossProcessTransport  # lazy (these three): JAX starts in join
    from obscura_jax.processes.distributed import run_distributed
    from experiments.transfer_benchmark import time_sizes

    def body(group):
        import jax  # lazy: started by join

        devices = jax.devices()[:2]
        times = time_sizes(lambda d, specs, nbytes: CrossProcessTransport(d, specs, nbytes, group.rank),
                           devices, args.reps)
        if group.is_leader:
            write_json_atomic(Path(args.out) / "cross_process.json", times)
        return 0
    return run_distributed(process_spec(None, None, None, devices="cpu"), body)


def bench(args) -> int:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rc = launch_local(["--out", str(out), "--reps", str(args.reps)], 2,
                      command=[sys.executable, os.path.abspath(__file__)])
    if rc != 0:
        return rc
    from obscura_jax.devices import request_host_devices  # lazy (these four): JAX starts after the request
    request_host_devices(2)
    import jax
    from experiments.transfer_benchmark import report, time_sizes
    from obscura_jax.runtime.transport import Transport

    local = time_sizes(lambda d, specs, nbytes: Transport(d, nbytes), jax.devices("cpu")[:2], args.reps)
    results = {"in-process": local, "cross-process": json.loads((out / "cross_process.json").read_text())}
    write_json_atomic(out / "bench_transfer.json", {"reps": args.reps, "seconds_one_way": results})
    for line in report(results):
        print(line)
    print(f"wrote {out / 'bench_transfer.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
