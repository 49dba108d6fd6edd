"""models.lazy_attributes (models/__init__.py): a package's names load on first use and
are then plain attributes of the package (a search reads some of them millions of times)."""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import sys, models
assert "unit_ops" not in vars(models) and "models.registry" in sys.modules
first = models.unit_ops                      # through the package's __getattr__
assert vars(models)["unit_ops"] is first     # kept: the next read is a plain attribute
import models.registry
assert first is models.registry.unit_ops
assert "jax" not in sys.modules, "a cached name must not load more than it did"
try:
    models.no_such_name
except AttributeError as e:
    assert "no_such_name" in str(e)
else:
    raise AssertionError("an unknown name must raise AttributeError")
print("ok")
"""


def test_a_name_loads_once_and_stays_in_the_package():
    done = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]
