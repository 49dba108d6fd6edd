"""Scripts import their shared helper (figlib) from their own folder, as they do when
run as `python scripts/<name>.py`."""
import sys
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"
if str(SCRIPTS) not in sys.path:
    sys.path.insert(0, str(SCRIPTS))
