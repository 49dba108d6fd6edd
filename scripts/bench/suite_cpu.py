"""Where the test suite's CPU time goes: runs pytest with the tests.cpu_report plugin
(each test's CPU seconds, its own process's and its waited-for children's, and wall
seconds) and prints the heaviest tests and modules.

    python scripts/bench/suite_cpu.py [--top 25] [--report cpu.jsonl] [-- PYTEST_ARGS ...]
    python scripts/bench/suite_cpu.py --read cpu.jsonl          only print an earlier report
    python scripts/bench/suite_cpu.py --read after.jsonl --against before.jsonl
                                        the tests both reports hold, before and after
(a report whose name ends in .gz is read through gzip)

PYTEST_ARGS default to `make test`'s: -q and the Makefile's XDIST flags.
--against compares two reports test by test: a test is the same in both when its
file path and id are, or (for tests whose folder moved) its file's name and id are,
and that name is unique on each side. It prints the CPU seconds of the tests both
hold, before and after, then those only one holds.
Prints the run's wall time and its CPU seconds (user + system of pytest and everything
it waited for), then the --top tests and modules by CPU seconds. CPU seconds hold whatever ran
beside the run (wall seconds do not): on 2 cores, 8 minutes of wall time need about
900 of them at most.
"""
from __future__ import annotations

import argparse
import collections
import gzip
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def make_test_args() -> list[str]:
    """`make test`'s pytest arguments: -q and the Makefile's XDIST line (one source)."""
    match = re.search(r"^XDIST\s*:=\s*(.+)$", (ROOT / "Makefile").read_text(), re.M)
    if not match:
        print("suite_cpu.py: the Makefile has no XDIST line", file=sys.stderr)
        raise SystemExit(2)
    return ["-q", *match.group(1).split()]


def read_rows(path: Path) -> list[dict]:
    """A report's rows; a name ending in .gz is read through gzip (the reports kept
    under results/suite_cpu/)."""
    text = gzip.decompress(path.read_bytes()).decode() if path.suffix == ".gz" else path.read_text()
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def table(rows: list[dict], key: str, top: int) -> list[str]:
    """The `top` groups of rows by `key` ("test" or "module"), heaviest CPU first."""
    cpu, wall, n = collections.Counter(), collections.Counter(), collections.Counter()
    for r in rows:
        cpu[r[key]] += r["self_s"] + r["children_s"]
        wall[r[key]] += r["wall_s"]
        n[r[key]] += 1
    lines = [f"{'CPU s':>8} {'wall s':>8} {'tests':>5}  {key}"]
    lines += [f"{c:8.1f} {wall[k]:8.1f} {n[k]:5d}  {k}" for k, c in cpu.most_common(top)]
    return lines


def report(rows: list[dict], top: int) -> str:
    total = sum(r["self_s"] + r["children_s"] for r in rows)
    out = [f"{len(rows)} tests, {total:.0f} CPU-s in tests (their own and their children's)", ""]
    out += table(rows, "test", top) + [""] + table(rows, "module", top)
    return "\n".join(out)


def _moved_key(test: str) -> str:
    """A test's file name and id, without its folders: `tests/a/test_x.py::t` -> `test_x.py::t`."""
    path, _, ident = test.partition("::")
    return f"{Path(path).name}::{ident}"


def match_tests(before: list[dict], after: list[dict]) -> tuple[list[tuple[str, str]], set[str], set[str]]:
    """(pairs (before's name, after's name) of the same test, names only before holds,
    names only after holds): the same path and id first, then, among the rest, the same
    file name and id where that is unique on both sides."""
    old, new = {r["test"] for r in before}, {r["test"] for r in after}
    pairs = [(t, t) for t in sorted(old & new)]
    rest_old, rest_new = old - new, new - old

    def unique(names: set[str]) -> dict[str, str]:
        keys = collections.Counter(_moved_key(t) for t in names)
        return {_moved_key(t): t for t in names if keys[_moved_key(t)] == 1}
    by_old, by_new = unique(rest_old), unique(rest_new)
    moved = [(by_old[k], by_new[k]) for k in sorted(by_old.keys() & by_new.keys())]
    pairs += moved
    return pairs, rest_old - {a for a, _ in moved}, rest_new - {b for _, b in moved}


def comparison(before: list[dict], after: list[dict], top: int) -> str:
    """The CPU seconds of the tests both reports hold, before and after, the `top`
    largest changes among them, and the tests only one report holds."""
    def cpu(rows: list[dict]) -> collections.Counter:
        out = collections.Counter()
        for r in rows:
            out[r["test"]] += r["self_s"] + r["children_s"]
        return out
    old, new = cpu(before), cpu(after)
    pairs, only_old, only_new = match_tests(before, after)
    both_old, both_new = sum(old[a] for a, _ in pairs), sum(new[b] for _, b in pairs)
    out = [f"tests in both: {len(pairs)}, {both_old:.0f} CPU-s before, {both_new:.0f} after "
           f"({both_new / both_old:.2f}x)" if both_old else f"tests in both: {len(pairs)}",
           f"only after: {len(only_new)} tests, {sum(new[t] for t in only_new):.0f} CPU-s",
           f"only before: {len(only_old)} tests, {sum(old[t] for t in only_old):.0f} CPU-s", "",
           f"{'before':>8} {'after':>8}  test in both (largest changes)"]
    changes = sorted(pairs, key=lambda ab: -abs(new[ab[1]] - old[ab[0]]))[:top]
    out += [f"{old[a]:8.1f} {new[b]:8.1f}  {b}" for a, b in changes]
    out += ["", f"{'CPU s':>8}  only after (heaviest)"]
    out += [f"{new[t]:8.1f}  {t}" for t in sorted(only_new, key=lambda t: -new[t])[:top]]
    return "\n".join(out)


def run_suite(pytest_args: list[str], report_path: Path) -> tuple[int, float, float]:
    """pytest's exit status, wall seconds and CPU seconds (it and its children)."""
    report_path.unlink(missing_ok=True)
    env = dict(os.environ, OBSCURA_CPU_REPORT=str(report_path))
    before, t0 = resource.getrusage(resource.RUSAGE_CHILDREN), time.monotonic()
    rc = subprocess.call([sys.executable, "-m", "pytest", "-p", "tests.cpu_report", *pytest_args], cwd=ROOT, env=env)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return rc, time.monotonic() - t0, cpu


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--top", type=int, default=25, help="rows of each table (default: 25)")
    ap.add_argument("--report", type=Path, help="where the plugin writes its lines (default: a temporary file)")
    ap.add_argument("--read", type=Path, help="print this earlier report and run nothing")
    ap.add_argument("--against", type=Path, help="with --read: compare it with this earlier report, test by test")
    ap.add_argument("pytest_args", nargs=argparse.REMAINDER, help="-- PYTEST_ARGS (default: make test's)")
    args = ap.parse_args(argv)
    if args.top < 1:
        ap.error("--top must be >= 1")
    if args.against is not None and args.read is None:
        ap.error("--against needs --read (the report to compare)")
    if args.read is not None:
        if not args.read.is_file():
            ap.error(f"--read: no such file: {args.read}")
        if args.against is not None and not args.against.is_file():
            ap.error(f"--against: no such file: {args.against}")
        try:
            after = read_rows(args.read)
            text = (comparison(read_rows(args.against), after, args.top) if args.against is not None
                    else report(after, args.top))
        except (OSError, ValueError, KeyError, TypeError) as e:   # not a report this plugin wrote
            ap.error(f"not a CPU report (tests/cpu_report.py's JSON lines): {type(e).__name__}: {str(e)[:200]}")
        print(text)     # outside the try: a closed pipe is not a bad report
        return 0
    pytest_args = args.pytest_args[1:] if args.pytest_args[:1] == ["--"] else args.pytest_args
    path = args.report or Path(tempfile.mkdtemp(prefix="suite-cpu-")) / "cpu.jsonl"
    rc, wall, cpu = run_suite(pytest_args or make_test_args(), path)
    print(f"\npytest exit {rc}: {wall:.0f} s wall, {cpu:.0f} CPU-s (user + system, with every child); "
          f"report {path}\n")
    print(report(read_rows(path), args.top))
    return rc


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BrokenPipeError:     # a reader that stopped early (`| head`): quiet, 141, as `obscura ... | head`
        from obscura_jax.cli.main import reader_gone  # lazy: only when the pipe closed
        sys.exit(reader_gone())
