"""scripts/bench/suite_compiles.py: a pytest run's XLA compiles by program; pytest's
exit status is passed on; tests given with -n, or none, get one line and exit 2."""
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "bench" / "suite_compiles.py"
TESTS = """
import jax
import jax.numpy as jnp
import numpy as np

def test_compiles_one_program_on_three_devices():
    salt = float(np.random.default_rng().integers(1 << 30))   # a computation no cache holds

    def f(w, x):
        return jnp.tanh(x @ w).sum(0) + salt
    for d in jax.devices()[:3]:
        w, x = jax.device_put(jnp.ones((8, 8)), d), jax.device_put(jnp.ones((2, 8)), d)
        jax.jit(f).lower(w, x).compile()(w, x)

def test_fails_when_asked():
    import os  # lazy: the one test that reads the environment
    assert os.environ.get("FAIL_ONE") != "1"
"""


def run(*args: str, env: dict | None = None) -> tuple[int, str, str]:
    r = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=300, cwd=ROOT,
                       env=dict(os.environ, **(env or {})))
    return r.returncode, r.stdout, r.stderr


def compiles_of(out: str, program: str) -> int:
    return sum(int(line.split()[1]) for line in out.splitlines() if line.split()[2:] == [program])


def test_it_counts_each_program_once_per_device_and_passes_the_exit_status_on(tmp_path):
    tests = tmp_path / "test_three.py"
    tests.write_text(TESTS)
    rc, out, _ = run("--", str(tests))
    assert rc == 0 and compiles_of(out, "jit_f") == 3, out[-2000:]   # a CPU program is keyed by its device
    assert "pytest exit 0" in out and "compiles," in out
    rc, out, _ = run("--", str(tests), env={"FAIL_ONE": "1"})
    assert rc == 1 and "pytest exit 1" in out, out[-2000:]


def test_workers_or_no_tests_are_one_line_and_exit_2():
    for args in (["--", "tests", "-n", "2"], ["--", "tests", "-n2"], []):
        rc, out, err = run(*args)
        assert rc == 2 and len(err.strip().splitlines()) == 1 and "without -n" in err, (args, err)
