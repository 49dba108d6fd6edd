"""Write torch.distributed.pipelining's own schedule orders as compute_only CSVs, the
goldens of tests/schedules/test_torch_goldens.py.

    python3 -m venv /tmp/torchvenv && /tmp/torchvenv/bin/pip install torch==2.13.0 numpy
    /tmp/torchvenv/bin/python scripts/goldens/make_torch_goldens.py [--out tests/schedules/goldens/torch]

Runs in a venv of its own: torch is never a dependency of this package, and neither
the package nor its tests import it. Each schedule class is built by its own
constructor (so its own checks accept or refuse a size) on fake stages that carry
only what the constructors read (no process group, no module); its `pipeline_order`
(GPipe's `_get_pipeline_order`, which adds REDUCE_GRAD) is written one row per rank,
as `PipelineScheduleMulti._dump_csv` writes it. Refusals go to REFUSED.txt, one line
each. p in {2, 4, 8}, m in {p, 2p, 4p}; the chunked schedules with V = 2 local stages
per rank (ZBV and DualPipeV need exactly 2), InterleavedZeroBubble also with V = 1.
"""
from __future__ import annotations

import argparse
import csv
from pathlib import Path

import torch
from torch.distributed.pipelining import schedules as S

ROOT = Path(__file__).resolve().parents[2]
SIZES = [(p, m) for p in (2, 4, 8) for m in (p, 2 * p, 4 * p)]
# file prefix -> (class, local stages per rank)
MULTI = {
    "interleaved1f1b_v2": (S.ScheduleInterleaved1F1B, 2),
    "interleavedzb_v1": (S.ScheduleInterleavedZeroBubble, 1),
    "interleavedzb_v2": (S.ScheduleInterleavedZeroBubble, 2),
    "zbv": (S.ScheduleZBVZeroBubble, 2),
    "loopedbfs_v2": (S.ScheduleLoopedBFS, 2),
    "dualpipev": (S.ScheduleDualPipeV, 2),
}


class FakeStage:
    """What the schedule constructors read of a stage (a PipelineStage needs a
    process group and a module; the orders depend on neither)."""

    def __init__(self, stage_index: int, num_stages: int, rank: int, group_size: int):
        self.stage_index, self.num_stages = stage_index, num_stages
        self.group_rank, self.group_size = rank, group_size
        self.is_first, self.is_last = stage_index == 0, stage_index == num_stages - 1
        self.submod = None              # not an nn.Module: the torch.compile check skips it
        self.stage_index_to_group_rank = {}


def _rank_stages(cls, p: int, v: int) -> list[int]:
    """Rank 0's stages: looped (s = rank + k*p) or, for the V schedules, the V."""
    if cls in (S.ScheduleZBVZeroBubble, S.ScheduleDualPipeV):
        return [0, 2 * p - 1]
    return [k * p for k in range(v)]


def multi_order(cls, p: int, m: int, v: int) -> dict[int, list]:
    """pipeline_order of `cls` (built as rank 0 builds it: every rank's row)."""
    n = p * v
    stages = [FakeStage(s, n, 0, p) for s in _rank_stages(cls, p, v)]
    return cls(stages, m, loss_fn=lambda *a: None).pipeline_order


def gpipe_order(p: int, m: int) -> dict[int, list]:
    return S.ScheduleGPipe(FakeStage(0, p, 0, p), m, loss_fn=lambda *a: None)._get_pipeline_order()


def write_csv(path: Path, order: dict[int, list]) -> None:
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        for rank in sorted(order):
            writer.writerow(["" if a is None else str(a) for a in order[rank]])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "tests" / "schedules" / "goldens" / "torch"))
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    refused = []
    jobs = [(f"{prefix}_p{p}_m{m}", lambda cls=cls, v=v, p=p, m=m: multi_order(cls, p, m, v))
            for prefix, (cls, v) in MULTI.items() for p, m in SIZES]
    jobs += [(f"gpipe_p{p}_m{m}", lambda p=p, m=m: gpipe_order(p, m)) for p, m in SIZES]
    written = 0
    for name, build in jobs:
        try:
            order = build()
        except (ValueError, AssertionError, RuntimeError) as e:
            refused.append(f"{name}: {type(e).__name__}: {' '.join(str(e).split())}")
            continue
        write_csv(out / f"{name}.csv", order)
        written += 1
    (out / "REFUSED.txt").write_text("".join(f"{line}\n" for line in refused))
    print(f"torch {torch.__version__}: wrote {written} CSVs to {out}, {len(refused)} refused (REFUSED.txt)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
