"""The files a command is given, checked before any work: one line naming the flag,
exit 2, nothing read and nothing written (docs/cli.md, "Every command").

- Every output is checked where it will be written: an output file (`--json`,
  `--gantt` and its SVG, `--csv`, `--trace`, `--torch-csv`, `--schedule-json`, `--costs-json`) must
  be a path a file can be renamed onto (not a directory, in a folder that takes new
  files), never an existing device node, FIFO or socket (outputs are written by
  renaming a finished temporary file over the target, which would replace the node:
  as root, /dev/null itself), never a symlink to nothing (writing through it would
  create a file wherever it points); an output directory (`--checkpoint-dir`,
  `--xla-profile`, compare's `--out`) must be a directory, or creatable, in a folder
  that takes new files. So `--checkpoint-dir out.json` next to an existing file, or
  an unwritable `--xla-profile`, is answered before training, not after it.
- No output may name an input or another output, compared by the file each would
  write (symlinks resolved): `--json prof.json --profile prof.json` would replace the
  input, `--json x --trace x` would lose one output; and no input may lie inside
  compare's `--out`, which is replaced whole.
- An input file (`--data`, `--plan`, `--schedule`/`--from-schedule` files, `--costs`,
  `--calibration`, `--profile`, `--measured`, `--from-torch-csv`, `--model-module`
  .py paths) that exists must be a regular file: a FIFO would block the read for
  ever, /dev/zero would never end.
- A JSON input is read by the one bounded reader (schedules.formats.jsonio.read_json:
  nesting, integer digits, size), naming the flag.
- A schedule or plan file (JSON, or torch's compute_only CSV) within the pipeline
  bounds of schedules.generators (MAX_STAGES, MAX_MICROBATCHES, MAX_PAIRS), which the
  generators apply to their arguments: a file's counts are read (a CSV's largest stage
  and micro-batch index, its rows) before anything is built from them, so
  `0F99999999999` or 10^12 declared micro-batches answer at once instead of looping.
  The loaders in schedules/ (jsonio.read_json, io.load_schedule, torch_csv) apply the
  same guards themselves for Python API users; these checks stay to answer before any
  other work, naming the flag."""
from __future__ import annotations

import os
import re

from models.errors import ObscuraError
from obscura_jax.errors import UsageError
from schedules.generators import check_pipeline_size
from schedules.formats.jsonio import MAX_INT_DIGITS, MAX_JSON_DEPTH, check_writable, check_writable_folder, file_kind as _kind, read_json

OUTPUT_FLAGS = {"json": "--json", "gantt": "--gantt", "csv": "--csv", "trace": "--trace",
                "torch_csv": "--torch-csv", "schedule_json": "--schedule-json", "costs_json": "--costs-json"}
OUTPUT_DIRS = {"checkpoint_dir": "--checkpoint-dir", "xla_profile": "--xla-profile", "out": "--out"}
REPLACED_WHOLE = ("out",)      # compare publishes --out by replacing the directory
INPUT_FLAGS = {"data": "--data", "plan": "--plan", "schedule": "--schedule", "from_schedule": "--from-schedule",
               "costs": "--costs", "calibration": "--calibration", "profile": "--profile",
               "measured": "--measured", "from_torch_csv": "--from-torch-csv"}
JSON_INPUTS = ("plan", "schedule", "from_schedule", "costs", "calibration", "profile", "measured")
PIPELINE_FILES = ("plan", "schedule", "from_schedule", "from_torch_csv")
_CSV_NUMBERS = re.compile(r"([0-9]+)[A-Z_]+([0-9]+)")
__all__ = ["MAX_INT_DIGITS", "MAX_JSON_DEPTH", "check_files", "check_input_file"]


def check_files(args) -> None:
    """Every output and input path of the parsed command line."""
    outputs = output_files(args)
    for flag, path in outputs:
        try:
            check_writable(path, flag)
        except ObscuraError as e:
            raise UsageError(str(e)) from None
    dirs = [(flag, getattr(args, dest)) for dest, flag in OUTPUT_DIRS.items()
            if isinstance(getattr(args, dest, None), str) and getattr(args, dest)]
    for flag, path in dirs:
        check_output_dir(path, flag)
    inputs = input_files(args)
    for flag, path in inputs:
        if flag == "--model-module":
            check_input_file(path, flag)
        else:
            dest = next(d for d, f in INPUT_FLAGS.items() if f == flag)
            check_input_file(path, flag, json_file=dest in JSON_INPUTS and not path.endswith(".csv"),
                             pipeline=dest in PIPELINE_FILES)
    check_collisions(outputs + dirs, [(f, p) for f, p in inputs if os.path.exists(p)],
                     [(OUTPUT_DIRS[d], getattr(args, d)) for d in REPLACED_WHOLE
                      if isinstance(getattr(args, d, None), str) and getattr(args, d)])


def output_files(args) -> list[tuple[str, str]]:
    """(flag, path) of every file the command will write (a Gantt chart's SVG too)."""
    out = []
    for dest, flag in OUTPUT_FLAGS.items():
        path = getattr(args, dest, None)
        if isinstance(path, str):
            out.append((flag, path))
            if dest == "gantt" and path.strip():
                out.append(("--gantt", os.path.splitext(path)[0] + ".svg"))   # its SVG beside it
    return out


def input_files(args) -> list[tuple[str, str]]:
    """(flag, path) of every file the command will read (a --data keyword or a
    --schedule generator name is no file)."""
    out = []
    for dest, flag in INPUT_FLAGS.items():
        path = getattr(args, dest, None)
        if not isinstance(path, str) or not path or (dest == "data" and path in ("synthetic", "stdlib")):
            continue
        if dest == "schedule" and not (path.endswith((".json", ".csv")) or os.path.exists(path)):
            continue                       # a generator's name
        out.append((flag, path))
    out += [("--model-module", spec) for spec in getattr(args, "model_module", None) or () if spec.endswith(".py")]
    return out


def where(path: str) -> str:
    """The file writing (or reading) `path` touches: symlinks resolved, absolute."""
    return os.path.realpath(os.path.abspath(path))


def check_collisions(outputs, inputs, replaced) -> None:
    """No output on an input or on another output; no input inside a directory the
    command replaces whole."""
    seen: dict[str, tuple[str, str]] = {}
    for flag, path in inputs:
        seen.setdefault(where(path), (flag, path))
    for flag, path in outputs:
        key = where(path)
        if key in seen:
            other_flag, other = seen[key]
            if (other_flag, other) in inputs:
                raise UsageError(f"{flag} {path} would overwrite the input {other_flag} {other}: "
                                 "write the output elsewhere")
            raise UsageError(f"{other_flag} {other} and {flag} {path} name one file: each output needs a path "
                             "of its own")
        seen[key] = (flag, path)
    for dflag, folder in replaced:
        top = where(folder)
        for flag, path in inputs:
            if os.path.commonpath([top, where(path)]) == top:
                raise UsageError(f"{flag} {path} lies inside {dflag} {folder}, which the command replaces whole: "
                                 "move the input out of it")


def check_output_dir(path: str, flag: str) -> None:
    """A directory the command writes into: one, or creatable, in a folder that
    takes new files (probed by creating and removing an empty file)."""
    if not path.strip():
        raise UsageError(f"{flag} is empty: give a directory path")
    if os.path.islink(path) and not os.path.exists(path):
        raise UsageError(f"{flag} {path}: is a symlink to {os.readlink(path)}, which does not exist")
    what = _kind(path)
    if what is not None and what != "a directory":
        raise UsageError(f"{flag} {path}: is {what}, not a directory")
    if os.path.exists(path) and not os.path.isdir(path):
        raise UsageError(f"{flag} {path}: is a file, not a directory")
    check_writable_folder(path, f"{flag} {path}", UsageError, missing="cannot create it")


def check_input_file(path: str, flag: str, json_file: bool = False, pipeline: bool = False) -> None:
    what = _kind(path)
    if what is not None and what != "a directory":
        raise UsageError(f"{flag} {path}: is {what}, not a regular file")
    if what is not None or not os.path.isfile(path):
        return
    try:
        data = read_json(path, flag) if json_file else None
        if pipeline and isinstance(data, dict):
            stages = data.get("num_stages")
            if not isinstance(stages, int) and isinstance(data.get("stages"), list):
                stages = len(data["stages"])
            check_pipeline_size(stages, data.get("num_microbatches"))
        elif pipeline and path.endswith(".csv"):
            check_pipeline_size(*_csv_counts(path))
    except ObscuraError as e:
        text = str(e)
        raise UsageError(text if path in text else f"{flag} {path}: {text}") from None


def _csv_counts(path: str) -> tuple[int, int]:
    """(stages, micro-batches) a torch CSV names: its largest indices + 1 (at least
    its rows, one a rank), by a scan of the text; an index of more digits than any
    bound allows is refused as such (int() of 100,000 digits would fail)."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError):
        return 0, 0

    def number(digits: str) -> int:
        if len(digits) > 18:
            raise ObscuraError(f"a stage or micro-batch index of {len(digits)} digits is past this tool's bounds")
        return int(digits)
    stages = mbs = 0
    for m in _CSV_NUMBERS.finditer(text):
        stages, mbs = max(stages, number(m.group(1)) + 1), max(mbs, number(m.group(2)) + 1)
    return max(stages, len(text.strip().splitlines())), mbs
