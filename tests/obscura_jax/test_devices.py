"""obscura_jax.cpu_devices: emulated CPU devices chosen from Python, before JAX
starts; once JAX has started with fewer, one clear error (fresh interpreters)."""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _run(code: str) -> subprocess.CompletedProcess:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(ROOT)}   # no XLA_FLAGS from the test session
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          cwd=ROOT, env=env)


def test_cpu_devices_before_jax_starts():
    r = _run("import obscura_jax, sys; obscura_jax.cpu_devices(3); print('jax' in sys.modules); "
             "import jax; print(len(jax.devices('cpu')))")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["False", "3"]


def test_cpu_devices_after_jax_started_with_fewer_is_one_clear_error():
    r = _run("import jax, obscura_jax; jax.numpy.zeros(1); obscura_jax.cpu_devices(1)\n"
             "try:\n    obscura_jax.cpu_devices(4)\nexcept obscura_jax.ObscuraError as e:\n    print(e)")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("JAX already started with 1 CPU device(s), 4 asked: call "
                               "obscura_jax.cpu_devices(n) before any JAX computation")
