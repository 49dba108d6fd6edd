"""Run a command beside CPU-burning processes: the test suite on a busy machine.

    python scripts/bench/busy_load.py [--procs 6] [--timeout 3600] -- COMMAND [ARG ...]

Starts --procs processes that each spin one core, runs COMMAND (its environment
gets OBSCURA_BUSY_PIDS, the burners' pids), and exits with COMMAND's status, or 124
if it ran past --timeout seconds (its process group is killed). The burners are
stopped whatever happens: on COMMAND's end, on an error, on SIGINT/SIGTERM here; and
each stops by itself once this process is gone (even SIGKILLed) or --timeout (plus a
minute) has passed, so none outlives a run. `make test-busy` runs the suite this way.
"""
from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys

# one core's worth of work that ends once its parent changes (this process gone) or at `end`
BURNER = """
import os, sys, time
parent, end = int(sys.argv[1]), time.monotonic() + float(sys.argv[2])
while os.getppid() == parent and time.monotonic() < end:
    for _ in range(20000):
        pass
"""


def start_burners(n: int, seconds: float) -> list[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-c", BURNER, str(os.getpid()), str(seconds)],
                             stdin=subprocess.DEVNULL, start_new_session=True) for _ in range(n)]


def stop(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        if p.poll() is None:
            p.kill()
    for p in procs:
        p.wait()


def _raise_exit(signum, frame):
    raise SystemExit(128 + signum)


def run(command: list[str], procs: int, timeout: float) -> int:
    """COMMAND's exit status (124 past `timeout`), the burners stopped."""
    signal.signal(signal.SIGTERM, _raise_exit)
    burners, cmd = [], None
    try:
        burners = start_burners(procs, timeout + 60)
        env = dict(os.environ, OBSCURA_BUSY_PIDS=",".join(str(b.pid) for b in burners))
        cmd = subprocess.Popen(command, env=env, start_new_session=True)
        try:
            return cmd.wait(timeout)
        except subprocess.TimeoutExpired:
            print(f"busy_load: {' '.join(command)} still running after {timeout:.0f} s: killed", file=sys.stderr)
            return 124
    finally:
        if cmd is not None and cmd.poll() is None:
            try:
                os.killpg(cmd.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            cmd.wait()
        stop(burners)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--procs", type=int, default=6, help="CPU-burning processes (default: 6)")
    ap.add_argument("--timeout", type=float, default=3600, help="seconds COMMAND may run (default: 3600)")
    ap.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARG ...]")
    args = ap.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command or args.procs < 0 or args.timeout <= 0:
        ap.error("give -- COMMAND, --procs >= 0 and --timeout > 0")
    try:
        return run(command, args.procs, args.timeout)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
