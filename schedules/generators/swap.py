"""Swap pass: insert SO/SI actions for lambda_s whole-micro-batch blocks per row
(the paper's swapping-aware recompute, section 5). Pure: rows in, new rows out.
A row is a device's: with several stages on a device a block is one (stage,
micro-batch), and lambda counts the device's blocks. A split backward's I needs the
residuals like a full B does (the SI comes before it); the block stays resident
until its W.

Memory peaks when a forward starts (it allocates its block then), so the pass
keeps R = w - lambda blocks resident at every forward's start (w = warm-up
forwards), which is Eq. 1's A_s when each transfer fits under one forward:
  eviction         warm-up: SO(x) right after F(x) for the lambda blocks
                   x = w-lambda-2 .. w-3. Not the last two: an SO frees memory only
                   when it ends, so the SO after F(w-2) (and of course after F(w-1))
                   would still be running when F(w-1) starts, at the peak;
  eviction-loading steady: after F(y), SO(y) evicts that newest block, then SI
                   loads the oldest evicted one (the simulator starts an SI only
                   after the SO listed before it ends: evict one block, then load
                   one, so the level never rises above R);
  loading          cool-down: after each backward, SI the oldest evicted block, so
                   it overlaps the next backward.
Transfers thus overlap compute for up to f, 3f+r and 2f+r respectively. A block
is loaded w-lambda-2 steps before its backward needs it (lambda <= w-4 keeps every
load hidden when transfers fit under a step); with lambda > w-3 the
window starts at block 0, loads come right before their backwards and the peak is
a block above R.

    stage 0, w=5, lambda=2, m=8:
    F0 F1 SO1 F2 SO2 F3 F4 | B0 F5 SO5 SI1 B1 F6 SO6 SI2 B2 F7 SO7 SI5 | B3 SI6 B4 SI7 B5 B6 B7
"""
from __future__ import annotations

from collections import deque
from typing import Sequence

from schedules.actions import COMPUTE_KINDS, split_blocks
from schedules.errors import ScheduleError
from schedules.generators.common import Setup, assemble, assemble_devices, warmup_count
from schedules.ir import BACKWARD_INPUT_KINDS, Action, Kind, Schedule
from schedules.memory import Levels, OrderOp, StageMemory, Uniform

WHOLE_BLOCKS = Uniform(StageMemory(kept=1.0, swap_fraction=1.0))   # a block is resident or not


def chain_swap_blocks(k: int, lam_k: int | None, warm: Sequence[int], stages=None) -> tuple[int, ...]:
    """Eq. 4's chain: lambda_k blocks at the last adjusted row k, lambda_{s-1} =
    lambda_s + 1 on earlier rows in `stages` (default 0..k), each capped at its
    warm-up forwards minus one so it keeps one block resident; none elsewhere (and
    none at all for lam_k None)."""
    chained = range(k + 1) if stages is None else set(stages)
    if lam_k is None:
        return (0,) * len(warm)
    return tuple(max(0, min(lam_k + (k - s), warm[s] - 1)) if s in chained else 0 for s in range(len(warm)))


def swap_intent(swap_blocks, swap_fraction, adjusted) -> tuple[int, ...]:
    """The rows the swap pass will give blocks (every adjusted row for an integer > 0,
    the positive entries of a tuple), when beta > 0: a relaxation prices their links
    as shared before the rows exist. Malformed values give none here
    (resolve_swap_blocks says what is wrong)."""
    if isinstance(swap_fraction, bool) or not isinstance(swap_fraction, (int, float)) or swap_fraction <= 0:
        return ()
    if isinstance(swap_blocks, bool):
        return ()
    if isinstance(swap_blocks, int):
        return tuple(adjusted) if swap_blocks > 0 else ()
    if isinstance(swap_blocks, (tuple, list)):
        return tuple(r for r, v in enumerate(swap_blocks) if isinstance(v, int) and not isinstance(v, bool) and v > 0)
    return ()


def resolve_swap_blocks(swap_blocks, swap_fraction, rows, adjusted) -> tuple[int, ...]:
    """Per-row lambda (`adjusted`: the rows, i.e. devices, that recompute). An int is
    lambda_K at the last adjusted row K, chained to the earlier adjusted rows by
    `chain_swap_blocks`; a tuple gives every row's lambda explicitly."""
    p = len(rows)
    if isinstance(swap_fraction, bool) or not isinstance(swap_fraction, (int, float)) \
            or not 0.0 <= swap_fraction <= 1.0:
        raise ScheduleError(f"swap fraction must be a number in [0, 1], got {swap_fraction!r}")
    warm = [warmup_count(r) for r in rows]
    if isinstance(swap_blocks, bool):
        raise ScheduleError(f"swap_blocks must be an integer or a tuple of integers, got {swap_blocks!r}")
    wants = swap_blocks > 0 if isinstance(swap_blocks, int) else any(
        isinstance(v, int) and v > 0 for v in swap_blocks)
    if wants and swap_fraction == 0.0:
        raise ScheduleError("swap_blocks > 0 needs a swap fraction > 0 (beta, the share of a block moved)")
    if isinstance(swap_blocks, int):
        if swap_blocks < 0:
            raise ScheduleError(f"swap_blocks must be >= 0, got {swap_blocks}")
        if swap_blocks == 0:
            return (0,) * p
        if not adjusted:
            raise ScheduleError("swap_blocks as one integer applies to adjusted stages, and none is adjusted "
                                "(give adjusted=K, or a per-stage tuple)")
        k = max(adjusted)
        if swap_blocks > warm[k] - 1:
            raise ScheduleError(f"swap_blocks={swap_blocks} at stage {k} must be <= {warm[k] - 1} "
                                f"(its warm-up forwards minus one resident block)")
        lam = list(chain_swap_blocks(k, swap_blocks, warm, adjusted))
    else:
        lam = list(swap_blocks)
        if len(lam) != p or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in lam):
            raise ScheduleError(f"swap_blocks tuple must hold {p} integers >= 0, got {swap_blocks!r}")
        for s, v in enumerate(lam):
            if v > warm[s] - 1:
                raise ScheduleError(f"swap_blocks[{s}]={v} must be <= {warm[s] - 1} "
                                    f"(stage {s}'s warm-up forwards minus one resident block)")
    return tuple(lam)


def add_swaps(rows: Sequence[Sequence[Action]], swap_blocks: Sequence[int]) -> list[list[Action]]:
    return [_swap_row(list(row), lam) if lam else list(row) for row, lam in zip(rows, swap_blocks)]


def _swap_row(row: list[Action], lam: int) -> list[Action]:
    """The row with its swaps: what stays resident is counted by the one memory
    fold (schedules.memory.Levels, one byte per block, all of it swapped)."""
    compute = [a for a in row if a.kind in COMPUTE_KINDS]
    split = split_blocks(compute)
    w = warmup_count(compute)
    target = w - lam                     # resident blocks kept once warm-up is over
    first = max(0, w - lam - 2)          # first block evicted in warm-up (by forward order)
    evicted: deque[tuple[int, int]] = deque()   # oldest evicted first
    out: list[Action] = []
    resident = Levels(WHOLE_BLOCKS)
    in_warmup = True
    forwards = 0

    def emit(a: Action) -> None:
        out.append(a)
        resident.apply_all(OrderOp(0.0, 0.0, a.stage, a.kind, a.microbatch), (a.stage, a.microbatch) in split)

    for i, a in enumerate(compute):
        blk = (a.stage, a.microbatch)
        if a.kind in BACKWARD_INPUT_KINDS:
            in_warmup = False
            if blk in evicted:            # never happens with the rules above; keeps B safe anyway
                evicted.remove(blk)
                emit(Action(a.stage, Kind.SI, a.microbatch))
        emit(a)
        if a.kind == Kind.F:
            if (in_warmup and first <= forwards < first + lam) or not in_warmup:
                emit(Action(a.stage, Kind.SO, a.microbatch))
                evicted.append(blk)
            forwards += 1
        if in_warmup:
            continue
        nxt = next((c for c in compute[i + 1:] if c.kind == Kind.F or c.kind in BACKWARD_INPUT_KINDS), None)
        if a.kind in BACKWARD_INPUT_KINDS and nxt is not None and nxt.kind == Kind.F:
            continue                    # the coming F + SO frees room first: load after it
        while evicted and resident.total < target:
            blk = evicted.popleft()
            emit(Action(blk[0], Kind.SI, blk[1]))
    return out


def swapped_schedule(name: str, setup: Setup, rows: Sequence[Sequence[Action]], swap_blocks, swap_fraction,
                     stage_to_device: Sequence[int] | None = None) -> Schedule:
    """Every generator's last step: the swap pass on `rows` (lambda per device row,
    resolve_swap_blocks; an integer lands on the last device hosting an adjusted
    stage), then the validated Schedule (one stage per device unless
    `stage_to_device` places several on a device)."""
    where = tuple(stage_to_device) if stage_to_device is not None else tuple(range(setup.num_stages))
    lam = resolve_swap_blocks(swap_blocks, swap_fraction, rows, sorted({where[s] for s in setup.adjusted}))
    if stage_to_device is None:
        return assemble(name, setup.num_microbatches, add_swaps(rows, lam), setup.adjusted, setup.recompute, lam,
                        swap_fraction)
    return assemble_devices(name, setup.num_microbatches, add_swaps(rows, lam), where, setup.adjusted,
                            setup.recompute, swap_fraction)
