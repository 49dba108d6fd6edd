"""The order in which `make test` deals the suite's modules to its workers
(tests/conftest.py: heaviest first, by WEIGHTS): the hook's order, and the Makefile's
xdist flags that keep it (xdist's --dist loadfile otherwise deals modules by their
number of tests, the hook's order lost)."""
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

from tests import conftest

MAKEFILE = conftest.ROOT / "Makefile"


def make_xdist_flags() -> list[str]:
    match = re.search(r"^XDIST\s*:=\s*(.+)$", MAKEFILE.read_text(), re.M)
    assert match, "Makefile: no XDIST line"
    return match.group(1).split()


def test_heavier_modules_come_first_each_modules_items_together(monkeypatch):
    monkeypatch.setattr(conftest, "WEIGHTS", {"tests/heavy.py": 50, "tests/middle.py": 10})
    paths = {n: conftest.ROOT / "tests" / f"{n}.py" for n in ("light", "middle", "heavy", "other")}
    names = ["light", "middle", "heavy", "light", "other", "heavy", "middle"]
    items = [SimpleNamespace(path=paths[n], name=f"{n}{i}") for i, n in enumerate(names)]
    conftest._heaviest_first(items)
    # listed modules by weight; unlisted ones after them, in collection order
    assert [it.name for it in items] == ["heavy2", "heavy5", "middle1", "middle6", "light0", "light3", "other4"]


def test_make_tests_xdist_flags_keep_the_hooks_order(tmp_path):
    """a.py and b.py (one test each) come before c.py and d.py (four each) in the
    collection, which the hook keeps; each worker must run its modules in that order.
    Dealt by test count (xdist's default) a worker would run c or d before a or b."""
    for name, n in (("a", 1), ("b", 1), ("c", 4), ("d", 4)):
        (tmp_path / f"test_{name}.py").write_text(
            "import os\n" + "".join(
                f"def test_{i}():\n    with open({str(tmp_path / 'log')!r}, 'a') as f:\n"
                f"        f.write(os.environ['PYTEST_XDIST_WORKER'] + ' {name}\\n')\n" for i in range(n)))
    flags = make_xdist_flags()
    assert "--dist" in flags and flags[flags.index("--dist") + 1] == "loadfile"
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *flags, str(tmp_path)],
                         cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    ran: dict[str, list[str]] = {}
    for line in Path(tmp_path / "log").read_text().splitlines():
        worker, module = line.split()
        if module not in ran.setdefault(worker, []):
            ran[worker].append(module)
    assert sorted(m for mods in ran.values() for m in mods) == ["a", "b", "c", "d"], ran
    for worker, modules in ran.items():
        assert modules == sorted(modules), (worker, modules)
