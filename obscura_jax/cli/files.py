"""The files a command is given, checked before any work (issue 24): one line naming
the flag, exit 2, nothing read and nothing written.

- An output flag (`--json`, `--gantt` and its SVG, `--csv`, `--trace`, `--torch-csv`,
  `--schedule-json`) naming something that exists and is not a regular file (a
  device node such as /dev/null, a FIFO, a socket) is refused: outputs are written by
  renaming a finished temporary file over the target, which would replace the node
  (as root, /dev/null itself). `--out` (a directory) must not be one either.
- An input file (`--data`, `--plan`, `--schedule`/`--from-schedule` files, `--costs`,
  `--calibration`, `--profile`, `--measured`, `--from-torch-csv`, `--model-module`
  .py paths) that exists must be a regular file: a FIFO would block the read for
  ever, /dev/zero would never end.
- A JSON input must parse within bounds: nesting at most MAX_JSON_DEPTH deep and
  integers of at most MAX_INT_DIGITS digits (Python's json raises RecursionError or
  ValueError on those, which are not bad-input errors of its own).
- A schedule or plan file (JSON, or torch's compute_only CSV) within the pipeline
  bounds of schedules.generators (MAX_STAGES, MAX_MICROBATCHES, MAX_PAIRS), which the
  generators apply to their arguments: a file's counts are read (a CSV's largest stage
  and micro-batch index, its rows) before anything is built from them, so
  `0F99999999999` or 10^12 declared micro-batches answer at once instead of looping.
  The loaders in schedules/ (jsonio.read_json, io.load_schedule, torch_csv) apply the
  same guards themselves for Python API users; these checks stay to answer before any
  other work, naming the flag."""
from __future__ import annotations

import json
import os
import re

from models.errors import ObscuraError
from obscura_jax.errors import UsageError
from schedules.generators import check_pipeline_size
from schedules.jsonio import MAX_INT_DIGITS, file_kind as _kind

OUTPUT_FLAGS = {"json": "--json", "gantt": "--gantt", "csv": "--csv", "trace": "--trace",
                "torch_csv": "--torch-csv", "schedule_json": "--schedule-json"}
INPUT_FLAGS = {"data": "--data", "plan": "--plan", "schedule": "--schedule", "from_schedule": "--from-schedule",
               "costs": "--costs", "calibration": "--calibration", "profile": "--profile",
               "measured": "--measured", "from_torch_csv": "--from-torch-csv"}
JSON_INPUTS = ("plan", "schedule", "from_schedule", "costs", "calibration", "profile", "measured")
PIPELINE_FILES = ("plan", "schedule", "from_schedule", "from_torch_csv")
_CSV_NUMBERS = re.compile(r"(\d+)[A-Z_]+(\d+)")
MAX_JSON_DEPTH = 1000


def check_files(args) -> None:
    """Every output and input path of the parsed command line."""
    for dest, flag in OUTPUT_FLAGS.items():
        path = getattr(args, dest, None)
        if not isinstance(path, str) or not path:
            continue
        targets = [path] + ([os.path.splitext(path)[0] + ".svg"] if dest == "gantt" else [])
        for target in targets:
            what = _kind(target)
            if what is not None and what != "a directory":      # a directory: the command's own line
                raise UsageError(f"{flag} {target}: is {what}, not a regular file: refusing to replace it")
    out = getattr(args, "out", None)
    if isinstance(out, str) and out and _kind(out) not in (None, "a directory"):
        raise UsageError(f"--out {out}: is {_kind(out)}, not a directory")
    for dest, flag in INPUT_FLAGS.items():
        path = getattr(args, dest, None)
        if isinstance(path, str) and path:
            check_input_file(path, flag, json_file=dest in JSON_INPUTS and not path.endswith(".csv"),
                             pipeline=dest in PIPELINE_FILES)
    for spec in getattr(args, "model_module", None) or ():
        if spec.endswith(".py"):
            check_input_file(spec, "--model-module")


def check_input_file(path: str, flag: str, json_file: bool = False, pipeline: bool = False) -> None:
    what = _kind(path)
    if what is not None and what != "a directory":
        raise UsageError(f"{flag} {path}: is {what}, not a regular file")
    if what is not None or not os.path.isfile(path):
        return
    data = check_json_bounds(path, flag) if json_file else None
    try:
        if pipeline and isinstance(data, dict):
            stages = data.get("num_stages")
            if not isinstance(stages, int) and isinstance(data.get("stages"), list):
                stages = len(data["stages"])
            check_pipeline_size(stages, data.get("num_microbatches"))
        elif pipeline and path.endswith(".csv"):
            check_pipeline_size(*_csv_counts(path))
    except ObscuraError as e:
        raise UsageError(f"{flag} {path}: {e}") from None


def _csv_counts(path: str) -> tuple[int, int]:
    """(stages, micro-batches) a torch CSV names: its largest indices + 1 (at least
    its rows, one a rank), by a scan of the text."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError):
        return 0, 0
    stages = mbs = 0
    for m in _CSV_NUMBERS.finditer(text):
        stages, mbs = max(stages, int(m.group(1)) + 1), max(mbs, int(m.group(2)) + 1)
    return max(stages, len(text.strip().splitlines())), mbs


def check_json_bounds(path: str, flag: str):
    """Parse `path` with bounded nesting and integer size: its data, or None where
    another problem (not UTF-8, malformed) is left to the reader, whose lines name it."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError):
        return None
    depth = _max_depth(text)
    if depth > MAX_JSON_DEPTH:
        raise UsageError(f"{flag} {path}: JSON nested {depth} deep; at most {MAX_JSON_DEPTH} levels are read")

    def bounded_int(digits: str) -> int:
        if len(digits.lstrip("-")) > MAX_INT_DIGITS:
            raise UsageError(f"{flag} {path}: JSON holds an integer of {len(digits.lstrip('-'))} digits; "
                             f"at most {MAX_INT_DIGITS} are read")
        return int(digits)
    try:
        return json.loads(text, parse_int=bounded_int)
    except UsageError:
        raise
    except (ValueError, RecursionError):      # malformed: the reader names it
        return None


def _max_depth(text: str) -> int:
    """Deepest [ / { nesting outside strings (a scan, no recursion)."""
    depth = best = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            best = max(best, depth)
        elif ch in "]}":
            depth -= 1
    return best
