"""Running an example as a user would: a subprocess, bounded by a timeout."""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


def run_example(name: str, *args: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    """Run examples/<name> with `args` in `cwd`; assert it exits 0; the result."""
    r = subprocess.run([sys.executable, str(EXAMPLES / name), *args], capture_output=True, text=True,
                       timeout=timeout, cwd=cwd)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return r
