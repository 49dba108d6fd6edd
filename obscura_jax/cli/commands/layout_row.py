"""`--layout ROW`: run one row of a layout sweep (`obscura sweep --json`, format
obscura-sweep/1; docs/layouts.md).

ROW is FILE:INDEX (INDEX counts the file's `layouts` from 1, as the sweep's table
and CSV rank them: fitting rows first, best MFU first) or FILE (its best fitting row
the model registry can shard). A row sets the model and sequence length (the
file's), and

    --stages pp   --data-parallel dp   --tensor-parallel tp
    --micro-batch-size micro_batch * dp  (the sweep's micro-batch is one data rank's;
                                          the runtime's is the whole, split over dp)
    --microbatches num_microbatches   --policy policy   attention -> attention_impl

A flag given explicitly that disagrees, a bad file or index, a row that does not fit
or that the registry cannot shard: one line, exit 2, before anything runs or is
written. A row with sequence parallelism on runs with a note: the runtime
replicates norms (no SP), so the row's memory and time are not this run's.
Read without JAX (devices are chosen after this).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from obscura_jax.errors import UsageError
from schedules.formats.jsonio import read_json

SWEEP_FORMAT = "obscura-sweep/1"
ATTENTIONS = ("xla", "cudnn")


@dataclass(frozen=True)
class LayoutRow:
    """One sweep row as `obscura train` flags."""
    where: str                 # "row 3 of sweep.json", for messages
    model: str
    seq_len: int
    stages: int
    data_parallel: int
    tensor_parallel: int
    micro_batch_size: int      # the whole micro-batch (the row's micro_batch x dp)
    microbatches: int
    policy: str
    attention: str
    sequence_parallel: bool

    def flags(self) -> dict:
        """args attribute -> value."""
        return {"model": self.model, "seq_len": self.seq_len, "stages": self.stages,
                "data_parallel": self.data_parallel, "tensor_parallel": self.tensor_parallel,
                "micro_batch_size": self.micro_batch_size, "microbatches": self.microbatches,
                "policy": self.policy}

    def note(self) -> str | None:
        if not self.sequence_parallel:
            return None
        return (f"note: {self.where} runs sequence parallelism in the sweep; the runtime replicates norms "
                "and activations between units over the tensor axis (no SP), so its memory and time are "
                "not the row's")


def _int(where: str, row: dict, key: str) -> int:
    v = row.get(key)
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise UsageError(f"{where}: {key!r} must be a positive integer, got {str(v)[:40]}")
    return v


def parse_row(spec: str) -> tuple[str, int | None]:
    """'FILE:INDEX' -> (FILE, INDEX); 'FILE' -> (FILE, None)."""
    m = re.fullmatch(r"(.+):(\d+)", spec)
    if m:
        return m.group(1), int(m.group(2))
    return spec, None


def load_row(spec: str) -> LayoutRow:
    """The row `spec` names, checked (module docstring)."""
    path, index = parse_row(spec)
    data = read_json(path, "sweep file")
    if not isinstance(data, dict) or data.get("format") != SWEEP_FORMAT:
        got = data.get("format") if isinstance(data, dict) else type(data).__name__
        raise UsageError(f"--layout {spec}: {path} is not an {SWEEP_FORMAT} file (`obscura sweep --json`): "
                         f"format {str(got)[:40]}")
    rows = data.get("layouts")
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise UsageError(f"--layout {spec}: {path} has no list of layouts")
    if index is None:
        found = [i for i, r in enumerate(rows, 1) if r.get("fits") is True and r.get("runnable", True) is True]
        if not found:
            raise UsageError(f"--layout {spec}: no row of {path} both fits and is runnable")
        index = found[0]
    if not 1 <= index <= len(rows):
        raise UsageError(f"--layout {spec}: {path} has rows 1..{len(rows)}, not {index}")
    row, where = rows[index - 1], f"row {index} of {path}"
    if row.get("fits") is not True:
        need = row.get("memory_per_gpu")
        size = f" (it needs {need / 2**30:.1f} GiB a GPU)" if isinstance(need, (int, float)) else ""
        raise UsageError(f"--layout {spec}: {where} does not fit in the sweep's GPU memory{size}")
    if row.get("runnable", True) is not True:
        raise UsageError(f"--layout {spec}: {where} is not runnable: {str(row.get('not_runnable'))[:200]}")
    model, seq = data.get("model"), data.get("seq_len")
    if not isinstance(model, str) or not model:
        raise UsageError(f"--layout {spec}: {path} names no model")
    if isinstance(seq, bool) or not isinstance(seq, int) or seq < 1:
        raise UsageError(f"--layout {spec}: {path} has no positive seq_len")
    policy, attention = row.get("policy"), row.get("attention")
    if not isinstance(policy, str) or not policy:
        raise UsageError(f"--layout {spec}: {where} has no policy")
    if attention not in ATTENTIONS:
        raise UsageError(f"--layout {spec}: {where}: attention must be one of {', '.join(ATTENTIONS)}, "
                         f"got {str(attention)[:40]}")
    sp = row.get("sp", False)
    if not isinstance(sp, bool):
        raise UsageError(f"--layout {spec}: {where}: 'sp' must be true or false")
    dp = _int(where, row, "dp")
    return LayoutRow(where, model, seq, _int(where, row, "pp"), dp, _int(where, row, "tp"),
                     _int(where, row, "micro_batch") * dp, _int(where, row, "num_microbatches"), policy,
                     attention, sp)


FLAG_NAMES = {"model": "--model", "seq_len": "--seq-len", "stages": "--stages",
              "data_parallel": "--data-parallel", "tensor_parallel": "--tensor-parallel",
              "micro_batch_size": "--micro-batch-size", "microbatches": "--microbatches", "policy": "--policy"}


def apply_layout(args) -> LayoutRow | None:
    """Set the flags of `--layout` on `args` (None without it); an explicit flag that
    disagrees is one line. Call before fill_defaults."""
    spec = getattr(args, "layout", None)
    if spec is None:
        return None
    if getattr(args, "plan", None):
        raise UsageError("--layout and --plan each fix the stages and the layout: give one")
    row = load_row(spec)
    for key, value in row.flags().items():
        given = getattr(args, key, None)
        if given is not None and given != value:
            raise UsageError(f"{FLAG_NAMES[key]} {given} disagrees with {row.where} ({value})")
        setattr(args, key, value)
    args.attention = row.attention
    return row
