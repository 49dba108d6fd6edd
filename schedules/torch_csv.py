"""torch.distributed.pipelining's schedule CSV, "compute_only" format, both ways.

torch writes one row per pipeline rank (PipelineScheduleMulti._dump_csv: a
csv.writer row of the rank's `pipeline_order`) and reads it back with `_load_csv(
filename, format="compute_only")`: each cell is an `_Action` string,
`[stage][type][microbatch]` (`_Action.__repr__` / `from_str` in
torch/distributed/pipelining/schedules.py), types F (forward), B (full backward),
I (input-grad half), W (weight-grad half); an empty cell is a step where the rank
idles (None). torch infers the stage -> rank map from which row a stage appears in.

Import (`from_torch_csv`): empty cells are dropped (our rows carry no timing);
`(a;b)OVERLAP_F_B` (DualPipeV's overlapped forward and backward) becomes its
sub-actions one after the other (we have no overlap); communication or sharding
actions (SEND_F, RECV_B, UNSHARD, ...) are not compute_only and are refused. The
result is validated like any schedule; the number of micro-batches is the largest
index + 1 unless given. Export (`to_torch_csv`): each device's compute actions in
torch's strings; a B followed by a W of the same micro-batch (our older spelling of
I) is written I; SO/SI and the stages' recompute settings have no torch form and
are left out.
"""
from __future__ import annotations

import csv
import io as _io
import os
import re
from pathlib import Path

from schedules.jsonio import write_text_atomic
from schedules.errors import ScheduleError
from schedules.ir import Action, Kind, Schedule, StageSpec
from schedules.validator import validate

_COMPUTE_RE = re.compile(r"^(\d+)(F|I|B|W)(\d+)$")
_OVERLAP_RE = re.compile(r"^\((.*)\)OVERLAP_F_B$")
_OTHER_RE = re.compile(r"^(\d*)(UNSHARD|RESHARD|REDUCE_GRAD|SEND_F|RECV_F|SEND_B|RECV_B|OVERLAP_F_B)(\d*)$")


def _cell(text: str, rank: int, step: int) -> list[Action]:
    t = text.strip()
    if not t:
        return []
    over = _OVERLAP_RE.match(t)
    if over:
        return [a for part in over.group(1).split(";") for a in _cell(part, rank, step)]
    m = _COMPUTE_RE.match(t)
    if m:
        return [Action(int(m.group(1)), Kind(m.group(2)), int(m.group(3)))]
    other = _OTHER_RE.match(t)
    if other:
        raise ScheduleError(f"torch CSV: rank {rank} step {step}: {t!r} is a {other.group(2)} action; only "
                            f"compute_only schedules (F, I, B, W) import")
    raise ScheduleError(f"torch CSV: rank {rank} step {step}: cannot parse {t!r} (expected an _Action "
                        f"string like 2F0, 2I0, 2W0)")


def from_torch_csv(text: str, name: str = "torch", num_microbatches: int | None = None) -> Schedule:
    """A validated Schedule from torch's compute_only CSV text (see the module docstring)."""
    lines = list(csv.reader(_io.StringIO(text)))
    while lines and not lines[-1]:      # blank lines at the end are not ranks
        lines.pop()
    rows = [[a for step, c in enumerate(cells) for a in _cell(c, rank, step)] for rank, cells in enumerate(lines)]
    if not rows:
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
    schedule = Schedule(name, p, m, tuple(StageSpec(()) for _ in range(p)), tuple(where[s] for s in range(p)),
                        tuple(tuple(r) for r in rows))
    validate(schedule)
    return schedule


def to_torch_csv(schedule: Schedule) -> str:
    """torch's compute_only CSV text of `schedule` (one row per device)."""
    validate(schedule)
    out = _io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    for row in schedule.rows:
        split = {(a.stage, a.microbatch) for a in row if a.kind is Kind.W}
        cells = []
        for a in row:
            if not a.is_compute:
                continue
            kind = Kind.I if a.kind is Kind.B and (a.stage, a.microbatch) in split else a.kind
            cells.append(f"{a.stage}{kind.value}{a.microbatch}")
        writer.writerow(cells)
    return out.getvalue()


def load_torch_csv(path: str | os.PathLike, name: str | None = None,
                   num_microbatches: int | None = None) -> Schedule:
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise ScheduleError(f"torch CSV not found: {path}") from None
    except OSError as e:
        raise ScheduleError(f"cannot read torch CSV {path}: {e.strerror}") from None
    except UnicodeDecodeError as e:
        raise ScheduleError(f"torch CSV {path} is not UTF-8 text (byte 0x{e.object[e.start]:02x} "
                            f"at offset {e.start})") from None
    return from_torch_csv(text, name or path.stem, num_microbatches)


def save_torch_csv(schedule: Schedule, path: str | os.PathLike) -> None:
    """Write atomically (a crash never leaves half a file where a good one was)."""
    write_text_atomic(path, to_torch_csv(schedule))
