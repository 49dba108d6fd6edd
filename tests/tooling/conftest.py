"""Scripts import their shared helpers (figlib, doc_values, ...) from their own folder,
as they do when run as `python scripts/<wing>/<name>.py`: every wing of scripts/ goes on
the path, so a test imports any script by its name."""
import sys
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"
for wing in sorted(p for p in SCRIPTS.iterdir() if p.is_dir() and p.name != "__pycache__"):
    if str(wing) not in sys.path:
        sys.path.insert(0, str(wing))
