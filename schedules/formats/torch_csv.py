"""torch.distributed.pipelining's schedule CSV, "compute_only" format, both ways.

torch writes one row per pipeline rank (PipelineScheduleMulti._dump_csv: a
csv.writer row of the rank's `pipeline_order`) and reads it back with `_load_csv(
filename, format="compute_only")`: each cell is an `_Action` string,
`[stage][type][microbatch]` (`_Action.__repr__` / `from_str` in
torch/distributed/pipelining/schedules.py), types F (forward), B (full backward),
I (input-grad half), W (weight-grad half); an empty cell is a step where the rank
idles (None). torch infers the stage -> rank map from which row a stage appears in.

Import (`from_torch_csv`): empty cells are dropped (our rows carry no timing);
`(a;b)OVERLAP_F_B` (DualPipeV's overlapped forward and backward) becomes a and b,
adjacent in the row and kept together as one overlapped unit (Schedule.overlapped:
it starts when both may start, takes a's time plus b's, both outputs leave at its
end; see the simulator for why); REDUCE_GRAD, UNSHARD and RESHARD (gradient
reduction and FSDP sharding: no stage compute, nothing this model times) are
skipped, and one note line says how many (appended to `notes` when a list is
given, else logged once as a warning, which Python prints to stderr when nothing
configured logging: the CLI shows it without knowing about notes); communication actions (SEND_F, RECV_B, ...) are not compute_only and are
refused, as is any cell that does not parse. The result is validated like any
schedule; the number of micro-batches is the largest index + 1 unless given.
The pipeline bounds (schedules.bounds) hold before anything is built: at most
MAX_STAGES rows, MAX_ACTIONS cells, each cell's stage and micro-batch index within
them, and the counts they give within check_pipeline_size; a file is read as
jsonio.read_text reads (a regular file, at most 256 MiB).
Export (`to_torch_csv`): each device's compute actions in torch's strings, an
overlapped pair as its `(a;b)OVERLAP_F_B` cell; a B followed by a W of the same
micro-batch (our older spelling of I) is written I; SO/SI and the stages'
recompute settings have no torch form and are left out.
"""
from __future__ import annotations

import csv
import io as _io
import logging
import os
import re
from pathlib import Path

from schedules.actions import COMPUTE_KINDS
from schedules.bounds import MAX_STAGES, check_action_count, check_index, check_pipeline_size
from schedules.formats.jsonio import read_text, write_text_atomic
from schedules.errors import ScheduleError
from schedules.ir import Action, Kind, Schedule, StageSpec
from schedules.validator import validate

_COMPUTE_RE = re.compile(r"^([0-9]+)(F|I|B|W)([0-9]+)$")   # ASCII digits only (\d takes any script's)
_SKIPPED = ("REDUCE_GRAD", "UNSHARD", "RESHARD")
_OVERLAP_RE = re.compile(r"^\((.*)\)OVERLAP_F_B$")
_OTHER_RE = re.compile(r"^([0-9]*)(UNSHARD|RESHARD|REDUCE_GRAD|SEND_F|RECV_F|SEND_B|RECV_B|OVERLAP_F_B)([0-9]*)$")


def _compute(text: str, rank: int, step: int, skipped: dict[str, int]) -> Action | None:
    """One action string: an Action, or None for a skipped kind (counted in `skipped`)."""
    m = _COMPUTE_RE.match(text)
    if m:
        where = f"torch CSV: rank {rank} step {step}: {text[:40]!r}: "
        return Action(_index(m.group(1), "stage", where), Kind(m.group(2)), _index(m.group(3), "micro-batch", where))
    other = _OTHER_RE.match(text)
    if other and other.group(2) in _SKIPPED:
        skipped[other.group(2)] = skipped.get(other.group(2), 0) + 1
        return None
    if other and other.group(2) != "OVERLAP_F_B":
        raise ScheduleError(f"torch CSV: rank {rank} step {step}: {text!r} is a {other.group(2)} action; only "
                            f"compute_only schedules (F, I, B, W, OVERLAP_F_B) import")
    raise ScheduleError(f"torch CSV: rank {rank} step {step}: cannot parse {text!r} (expected an _Action "
                        f"string like 2F0, 2I0, 2W0 or (0F3;7B1)OVERLAP_F_B)")


def _index(digits: str, what: str, where: str) -> int:
    """A stage or micro-batch index within the bounds (a number of too many digits
    for Python's int() is refused before converting)."""
    if len(digits) > 12:
        raise ScheduleError(f"{where}{what} index of {len(digits)} digits is past this tool's bound")
    check_index(what, int(digits), where)
    return int(digits)


def _rows(text: str) -> list[list[str]]:
    """The CSV's rows (blank ones at the end dropped), at most MAX_STAGES rows and
    MAX_ACTIONS non-empty cells, counted while reading."""
    lines: list[list[str]] = []
    cells = 0
    reader = csv.reader(_io.StringIO(text))
    try:
        for row in reader:
            lines.append(row)
            cells += sum(1 for c in row if c.strip())
            check_action_count(cells, "torch CSV: at least ")
    except csv.Error as e:
        raise ScheduleError(f"torch CSV: line {reader.line_num}: {e}") from None
    while lines and not lines[-1]:      # blank lines at the end are not ranks
        lines.pop()
    if len(lines) > MAX_STAGES:
        raise ScheduleError(f"torch CSV: {len(lines)} rows (ranks); number of stages must be <= {MAX_STAGES}")
    return lines


def _cell(text: str, rank: int, step: int, skipped: dict[str, int]) -> list[Action]:
    """A cell's actions: none (empty or skipped), one, or an overlapped pair's two."""
    t = text.strip()
    if not t:
        return []
    over = _OVERLAP_RE.match(t)
    if not over:
        a = _compute(t, rank, step, skipped)
        return [] if a is None else [a]
    parts = over.group(1).split(";")
    acts = [_COMPUTE_RE.match(x.strip()) and _compute(x.strip(), rank, step, skipped) for x in parts]
    if len(parts) != 2 or not all(acts):
        raise ScheduleError(f"torch CSV: rank {rank} step {step}: cannot parse {t!r} (an OVERLAP_F_B cell holds "
                            f"two compute actions, e.g. (0F3;7B1)OVERLAP_F_B)")
    return acts


def skipped_note(skipped: dict[str, int]) -> str | None:
    """The one note line for the cells an import skipped (None if none were)."""
    if not skipped:
        return None
    counts = ", ".join(f"{n} {kind}" for kind, n in sorted(skipped.items()))
    return (f"torch CSV: skipped {counts} cell{'s' if sum(skipped.values()) > 1 else ''} (gradient reduction and "
            "FSDP sharding run no stage compute; not modelled)")


def from_torch_csv(text: str, name: str = "torch", num_microbatches: int | None = None,
                   notes: list[str] | None = None) -> Schedule:
    """A validated Schedule from torch's compute_only CSV text (see the module
    docstring); the note on skipped cells, if any, is appended to `notes`."""
    lines = _rows(text)
    skipped: dict[str, int] = {}
    cells = [[_cell(c, rank, step, skipped) for step, c in enumerate(row)] for rank, row in enumerate(lines)]
    rows = [[a for cell in row for a in cell] for row in cells]
    pairs = tuple((cell[0], cell[1]) for row in cells for cell in row if len(cell) == 2)
    if not any(rows):
        raise ScheduleError("torch CSV: no actions")
    where: dict[int, int] = {}
    for rank, row in enumerate(rows):
        for a in row:
            if where.setdefault(a.stage, rank) != rank:
                raise ScheduleError(f"torch CSV: stage {a.stage} appears on rank {where[a.stage]} and on rank {rank}")
    p = max(where) + 1
    missing = sorted(set(range(p)) - set(where))
    if missing:
        raise ScheduleError(f"torch CSV: stage {missing[0]} has no actions (stages 0..{p - 1} expected)")
    empty = [r for r, row in enumerate(rows) if not row]
    if empty:
        raise ScheduleError(f"torch CSV: rank {empty[0]} has no actions")
    top = max(a.microbatch for row in rows for a in row) + 1
    m = top if num_microbatches is None else num_microbatches
    if isinstance(m, bool) or not isinstance(m, int) or m < top:
        raise ScheduleError(f"torch CSV: {num_microbatches!r} micro-batches, but micro-batch {top - 1} is used")
    try:
        check_pipeline_size(p, m)
    except ScheduleError as e:
        raise ScheduleError(f"torch CSV: {e}") from None
    schedule = Schedule(name, p, m, tuple(StageSpec(()) for _ in range(p)), tuple(where[s] for s in range(p)),
                        tuple(tuple(r) for r in rows), pairs)
    validate(schedule)
    note = skipped_note(skipped)
    if note and notes is not None:
        notes.append(note)
    elif note:
        logging.getLogger(__name__).warning("note: %s", note)
    return schedule


def to_torch_csv(schedule: Schedule) -> str:
    """torch's compute_only CSV text of `schedule` (one row per device)."""
    validate(schedule)
    out = _io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    second = {b: a for a, b in schedule.overlapped}
    for row in schedule.rows:
        cells = []
        for a in row:
            if a.kind not in COMPUTE_KINDS:
                continue
            kind = schedule.effective_kind(a)
            text = f"{a.stage}{kind.value}{a.microbatch}"
            if a in second:
                cells[-1] = f"({cells[-1]};{text})OVERLAP_F_B"
            else:
                cells.append(text)
        writer.writerow(cells)
    return out.getvalue()


def load_torch_csv(path: str | os.PathLike, name: str | None = None,
                   num_microbatches: int | None = None, notes: list[str] | None = None) -> Schedule:
    path = Path(path)
    text = read_text(path, "torch CSV", ScheduleError)
    return from_torch_csv(text, name or path.stem, num_microbatches, notes)


def lossy_note(schedule: Schedule) -> str | None:
    """One line when the CSV cannot hold part of `schedule`: recompute settings and
    SO/SI actions have no torch form and are dropped (None: nothing is lost)."""
    recompute = [str(s) for s, spec in enumerate(schedule.stages) if spec.recompute]
    swaps = sum(1 for row in schedule.rows for a in row if a.kind in (Kind.SO, Kind.SI))
    lost = ([f"the recompute settings of stage(s) {', '.join(recompute)}"] if recompute else []) + \
        ([f"{swaps} swap actions (SO/SI)"] if swaps else [])
    if not lost:
        return None
    return f"torch CSV of {schedule.name!r} drops {' and '.join(lost)}: torch's compute_only CSV has no form for them"


def save_torch_csv(schedule: Schedule, path: str | os.PathLike, notes: list[str] | None = None) -> None:
    """Write atomically (a crash never leaves half a file where a good one was).
    What the CSV cannot hold (`lossy_note`) is one line: appended to `notes` when a
    list is given, else logged once as a warning (stderr when nothing configured
    logging)."""
    write_text_atomic(path, to_torch_csv(schedule))
    note = lossy_note(schedule)
    if note and notes is not None:
        notes.append(note)
    elif note:
        logging.getLogger(__name__).warning("warning: %s", note)
