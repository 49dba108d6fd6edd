"""The one memory accounting: what a device holds over time, from op records alone.

Per (stage, micro-batch) block on the device (residuals, "activations"):
  F          allocates the stage's kept bytes at its start (an op's own `bytes` wins)
  SO         frees the swapped share (beta of the block) at its end
  SI         brings it back at its start
  I          on a recomputing stage, re-materialises at its start what recompute had
             dropped (kept without recompute minus kept with it), live until W: a
             split backward needs those values again in W; and frees, at its end,
             the bytes only the input gradient needed (StageCosts.freed_by_input_grad);
             or, when measured (StageCosts.weight_grad_held), the block becomes at
             I's end what W reads: its matmul inputs and output cotangents, which can
             be more than the residuals on a recomputing stage
  W, or B    frees the rest of the block at its end (B when the block has no W)
Inbox (what the device received but has not consumed yet, as the engine's ledger
counts it): the input of F(s, x) from the start of F(s-1, x) to the start of F(s, x),
and the gradient of B/I(s, x) from the start of the backward-input step of (s+1, x) to
the start of B/I(s, x), or to the end of W(s, x) when there is one: the split
backward's W needs that gradient again (StageCosts.boundary_bytes each).
At equal times frees come before allocations (a stream frees before it reuses).

`peak_activation_bytes` is the peak of the blocks alone; `peak_held_bytes` of blocks
plus inbox, the figure the planner adds weights and the rematerialisation working set
to. `peak_inflight_microbatches` counts blocks allocated and not yet freed.
"""
from __future__ import annotations

from dataclasses import dataclass

from schedules.ir import BACKWARD_INPUT_KINDS, Kind


@dataclass(frozen=True)
class StageMemory:
    """What one stage's ops allocate and free, in bytes per micro-batch."""
    kept: float = 0.0                  # residuals one F keeps
    swap_fraction: float = 0.0         # beta: the share an SO moves to host
    remat: float = 0.0                 # re-materialised by I on a recomputing stage, live until W
    freed_by_input_grad: float = 0.0   # freed at the end of I
    held_for_weight_grad: float | None = None   # the block from the end of I to W (wins over freed)
    inbox_input: float = 0.0           # the activation F receives (boundary bytes of stage s-1)
    inbox_grad: float = 0.0            # the gradient B/I receives (boundary bytes of stage s)


@dataclass(frozen=True)
class MemoryProfile:
    peak_activation_bytes: float
    peak_inflight_microbatches: int
    peak_held_bytes: float
    steps: tuple[tuple[float, float], ...]     # (time, resident block bytes), a step function


def device_memory(ops, memory, all_starts, num_stages: int) -> MemoryProfile:
    """Account one device. `ops`: its op records; `memory[s]`: StageMemory of stage
    s; `all_starts`: (stage, kind, micro-batch) -> start of every op of the timeline
    (producers of the inbox live on other devices)."""
    blocks, has_w = _block_events(ops, memory)
    peak, peak_n, steps = _levels(blocks, memory, has_w)
    held = _held(steps, ops, memory, all_starts, num_stages)
    return MemoryProfile(peak, peak_n, held, steps)


def _block_events(ops, memory):
    has_w = {(o.stage, o.microbatch) for o in ops if o.kind == Kind.W}
    events = []  # (time, order, what, op): order 0 = free first at equal times
    for o in ops:
        key = (o.stage, o.microbatch)
        if o.kind == Kind.F:
            events.append((o.start, 1, "alloc_mb", o))
        elif o.kind == Kind.SO:
            events.append((o.end, 0, "swap_out", o))
        elif o.kind == Kind.SI:
            events.append((o.start, 1, "swap_in", o))
        elif o.kind in BACKWARD_INPUT_KINDS and key in has_w:
            if o.kind == Kind.I and memory[o.stage].remat:
                events.append((o.start, 1, "remat", o))
            st = memory[o.stage]
            if st.held_for_weight_grad is not None:
                grows = st.held_for_weight_grad > st.kept + st.remat
                events.append((o.end, 1 if grows else 0, "input_grad_hold", o))
            elif st.freed_by_input_grad:
                events.append((o.end, 0, "input_grad_free", o))
        if o.kind == Kind.W or (o.kind == Kind.B and key not in has_w):
            events.append((o.end, 0, "free_mb", o))
    events.sort(key=lambda e: (e[0], e[1]))
    return events, has_w


def _levels(events, memory, has_w):
    """Step function of resident block bytes, its peak, and the peak block count."""
    size: dict[tuple[int, int], float] = {}
    resident: dict[tuple[int, int], float] = {}
    swapped: dict[tuple[int, int], float] = {}
    total, inflight, peak, peak_n = 0.0, 0, 0.0, 0
    scale = max([1.0] + [memory[s].kept for s in {o.stage for *_, o in events}])
    mem: list[tuple[float, float]] = [(0.0, 0.0)]
    for t, _, what, o in events:
        key = (o.stage, o.microbatch)
        st = memory[o.stage]
        if what == "alloc_mb":
            size[key] = st.kept if o.bytes is None else o.bytes
            resident[key] = size[key]
            total += size[key]
            inflight += 1
        elif what == "swap_out":
            moved = o.bytes if o.bytes is not None else st.swap_fraction * size.get(key, st.kept)
            moved = min(moved, resident.get(key, 0.0))
            resident[key] = resident.get(key, 0.0) - moved
            swapped[key] = swapped.get(key, 0.0) + moved
            total -= moved
        elif what == "swap_in":
            back = swapped.pop(key, 0.0)
            resident[key] = resident.get(key, 0.0) + back
            total += back
        elif what == "remat":
            resident[key] = resident.get(key, 0.0) + st.remat
            total += st.remat
        elif what == "input_grad_hold":
            total += st.held_for_weight_grad - resident.get(key, 0.0)
            resident[key] = st.held_for_weight_grad
        elif what == "input_grad_free":
            freed = min(st.freed_by_input_grad, resident.get(key, 0.0))
            resident[key] = resident.get(key, 0.0) - freed
            total -= freed
        else:
            total -= resident.pop(key, 0.0)
            swapped.pop(key, None)
            inflight = max(0, inflight - 1)
        total = max(total, 0.0) if abs(total) < 1e-6 * scale else total
        peak = max(peak, total)
        peak_n = max(peak_n, inflight)
        if mem and mem[-1][0] == t:
            mem[-1] = (t, total)
        else:
            mem.append((t, total))
    return peak, peak_n, tuple(mem)


def _held(steps, ops, memory, all_starts, num_stages: int) -> float:
    """Peak of the block step function plus the inbox (frees first at equal times)."""
    events = []
    prev = 0.0
    for t, total in steps:
        events.append((t, 0 if total < prev else 1, total - prev))
        prev = total
    start = {(o.stage, o.kind, o.microbatch): o.start for o in ops}
    w_end = {(o.stage, o.microbatch): o.end for o in ops if o.kind == Kind.W}
    for s in sorted({o.stage for o in ops}):
        st = memory[s]
        for x in sorted({o.microbatch for o in ops if o.stage == s}):
            if s > 0 and (s - 1, Kind.F, x) in all_starts and (s, Kind.F, x) in start:
                events.append((all_starts[(s - 1, Kind.F, x)], 1, st.inbox_input))
                events.append((start[(s, Kind.F, x)], 0, -st.inbox_input))
            if s < num_stages - 1:
                up = _backward_input_start(all_starts, s + 1, x)
                mine = _backward_input_start(start, s, x)
                if up is not None and mine is not None:   # a split backward keeps dy until W
                    events.append((up, 1, st.inbox_grad))
                    events.append((w_end.get((s, x), mine), 0, -st.inbox_grad))
    events.sort(key=lambda e: (e[0], e[1]))
    level = peak = 0.0
    for _, _, delta in events:
        level += delta
        peak = max(peak, level)
    return peak


def _backward_input_start(starts, stage: int, microbatch: int):
    i = starts.get((stage, Kind.I, microbatch))
    return i if i is not None else starts.get((stage, Kind.B, microbatch))
