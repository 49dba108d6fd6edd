#!/usr/bin/env python
"""A digest of what the commands write, to show that a change kept them byte for byte.

    python scripts/bench/output_digest.py > before.txt      # at one commit
    python scripts/bench/output_digest.py > after.txt       # at another
    diff before.txt after.txt                                # empty: the same bytes

Runs `obscura plan`, `obscura simulate` (every registered schedule: JSON, Perfetto
trace, torch CSV) and the paper-figure scripts' fast cases in a temporary directory,
and prints one line per file written: its sha256 and its name. Wall-clock fields
are not in these files (the plan's table prints its planning time; its JSON does
not), so two runs of the same code print the same digest.
"""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROFILE = "results/h200/profile_llama2-13b.json"
PLANS = (
    ["--layers", "88", "--stages", "8", "--microbatches", "32", "--memory-limit", "80GiB"],
    ["--stages", "4", "--microbatches", "16", "--memory-limit", "80GiB"],
    ["--layers", "48", "--stages", "8", "--microbatches", "16", "--memory-limit", "40GiB"],
)
FIGURES = (("fig05_bubbles", []), ("fig13_memory", ["--families", "llama2"]),
           ("fig16_ablation", ["--sizes", "23b", "--batches", "16"]))


def _schedules() -> list[str]:
    out = subprocess.run([sys.executable, "-c", "import schedules; print(' '.join(schedules.SCHEDULES))"],
                         cwd=ROOT, capture_output=True, text=True, check=True, timeout=120)
    return out.stdout.split()


def _obscura(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "obscura_jax", *args], cwd=ROOT, check=True, timeout=600,
                   stdout=subprocess.DEVNULL)


def _commands(out: Path) -> None:
    for i, args in enumerate(PLANS):
        _obscura("plan", "--profile", PROFILE, *args, "--json", str(out / f"plan_{i}.json"))
    for name in _schedules():
        stem = out / f"simulate_{name}"
        _obscura("simulate", "--schedule", name, "--stages", "4", "--microbatches", "8",
                 "--json", f"{stem}.json", "--trace", f"{stem}.trace.json", "--torch-csv", f"{stem}.csv")
    for script, args in FIGURES:
        subprocess.run([sys.executable, f"scripts/figures/{script}.py", *args, "--out", str(out / script)], cwd=ROOT,
                       check=True, timeout=600, stdout=subprocess.DEVNULL)


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        _commands(out)
        for path in sorted(p for p in out.rglob("*") if p.is_file() and p.suffix in (".json", ".csv", ".png")):
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
            print(f"{digest}  {path.relative_to(out).as_posix()}")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    sys.exit(main())
