"""What a pytest run compiles: XLA compiles by program name, with the CPU seconds the
process spent in each (a program found in the persistent compilation cache is not
compiled), and the run's own CPU seconds. pytest runs in this process, so give it
tests that run there (no -n; a test's child processes are not counted).

    python scripts/bench/suite_compiles.py [--top 20] -- PYTEST_ARGS
    python scripts/bench/suite_compiles.py -- tests/obscura_jax/test_command_matrix_gpt.py::test_every_command_runs_every_family

The cache is the suite's own, fresh for the run (tests/conftest.py), unless
JAX_COMPILATION_CACHE_DIR is set. On a CPU the same program placed on two devices is
two compiles (JAX keys a CPU program by its devices).
"""
from __future__ import annotations

import argparse
import collections
import os
import resource
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


class CompileCounter:
    """A pytest plugin: wraps JAX's compile step once conftest.py has set the cache up."""

    def __init__(self):
        self.seconds: collections.Counter = collections.Counter()
        self.count: collections.Counter = collections.Counter()

    def pytest_configure(self, config):
        from jax._src import compiler   # lazy: after conftest.py set JAX's cache variables
        real = compiler.backend_compile_and_load

        def counted(backend, module, *args, **kwargs):
            t = time.process_time()
            try:
                return real(backend, module, *args, **kwargs)
            finally:
                name = str(module.operation.attributes["sym_name"]).strip('"')
                self.count[name] += 1
                self.seconds[name] += time.process_time() - t
        compiler.backend_compile_and_load = counted

    def lines(self, top: int) -> list[str]:
        out = [f"{sum(self.count.values())} compiles, {sum(self.seconds.values()):.1f} CPU-s",
               f"{'CPU s':>8} {'count':>6}  program"]
        return out + [f"{s:8.1f} {self.count[k]:6d}  {k}" for k, s in self.seconds.most_common(top)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--top", type=int, default=20, help="programs listed (default: 20)")
    ap.add_argument("pytest_args", nargs=argparse.REMAINDER, help="-- PYTEST_ARGS (tests that run in-process)")
    args = ap.parse_args(argv)
    pytest_args = args.pytest_args[1:] if args.pytest_args[:1] == ["--"] else args.pytest_args
    if not pytest_args or any(a == "-n" or a.startswith("-n") and a[2:].isdigit() for a in pytest_args):
        print("suite_compiles.py: give the tests to run, without -n (workers' compiles are not counted)",
              file=sys.stderr)
        return 2
    os.chdir(ROOT)
    sys.path.insert(0, str(ROOT))
    import pytest  # lazy: after ROOT is on sys.path, for tests/conftest.py's imports
    counter = CompileCounter()
    t0, c0 = time.monotonic(), resource.getrusage(resource.RUSAGE_SELF)
    rc = pytest.main(["-q", "-p", "no:cacheprovider", *pytest_args], plugins=[counter])
    c1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (c1.ru_utime - c0.ru_utime) + (c1.ru_stime - c0.ru_stime)
    print(f"\npytest exit {rc}: {time.monotonic() - t0:.0f} s wall, {cpu:.0f} CPU-s in this process")
    print("\n".join(counter.lines(args.top)))
    return int(rc)


if __name__ == "__main__":
    sys.exit(main())
