"""The one memory accounting: a fold over the memory effects of the per-kind table
(schedules/actions.py, its memory column), from op records alone.

Per (stage, micro-batch) block on the device (residuals, "activations"):
  alloc        (F, at its start) the stage's kept bytes (an op's own `bytes` wins)
  swap_out     (SO, at its end) the swapped share (beta of the block) leaves
  swap_in      (SI, at its start) it comes back
  remat        (I, at its start) on a recomputing stage, what recompute had dropped
               (kept without recompute minus kept with it) is re-materialised and
               lives until W: a split backward needs those values again in W
  input_grad   (I, at its end) the bytes only the input gradient needed go
               (StageCosts.freed_by_input_grad); or, when measured
               (StageCosts.weight_grad_held), the block becomes what W reads: its
               matmul inputs and output cotangents, which can be more than the
               residuals on a recomputing stage
  free         (W, or B when the block has no W, at its end) the rest of the block
Inbox (what the device received but has not consumed yet, as the engine's ledger
counts it): the input of F(s, x) from the start of F(s-1, x) to the start of F(s, x),
and the gradient of B/I(s, x) from the start of the backward-input step of (s+1, x) to
the end of B(s, x), which reads it to its last instruction (not donated), or to the
end of W(s, x) when the backward is split: W needs that gradient again
(StageCosts.boundary_bytes each).
At equal times frees come before allocations (a stream frees before it reuses).

`peak_activation_bytes` is the peak of the blocks alone; `peak_held_bytes` of blocks
plus inbox, the figure the planner adds weights and the rematerialisation working set
to. `peak_inflight_microbatches` counts blocks allocated and not yet freed.

The same fold counts over an order instead of a timeline (`order_memory`: the
i-th action of a row starts at 2i and ends at 2i + 1): what the cap search holds
(generators/caps.py), the swap pass keeps resident (generators/swap.py), the
recompute IP's resident blocks and the planner's lower bound read, and a 1F1B
stage holds in the layout sweep. `fold_levels` is its running sum, which the
runtime's MemoryLedger settles in issue order; `block_levels` is the fold over
one block's F, I and W, what the zero-bubble heuristic charges each action
under a memory limit (generators/zero_bubble_auto.py).
"""
from __future__ import annotations

from dataclasses import dataclass
from operator import itemgetter
from typing import NamedTuple, Sequence

from schedules.actions import KINDS, effective_kind, split_blocks
from schedules.ir import BACKWARD_INPUT_KINDS, Action, Kind


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


class OrderOp(NamedTuple):
    """An action placed on an order's clock (order_memory)."""
    start: float
    end: float
    stage: int
    kind: Kind
    microbatch: int
    bytes: float | None = None


def device_memory(ops, memory, all_starts, num_stages: int) -> MemoryProfile:
    """Account one device. `ops`: its op records; `memory[s]`: StageMemory of stage
    s; `all_starts`: (stage, kind, micro-batch) -> start of every op of the timeline
    (producers of the inbox live on other devices)."""
    blocks, has_w = _block_events(ops, memory)
    peak, peak_n, steps = _levels(blocks, memory)
    held = _held(steps, ops, memory, all_starts, num_stages)
    return MemoryProfile(peak, peak_n, held, steps)


def order_memory(row: Sequence[Action], memory) -> MemoryProfile:
    """The fold over one row's order (no inbox): its i-th action starts at 2i, ends at 2i + 1."""
    make = tuple.__new__     # OrderOp's fields in order, without its keyword handling (a search folds often)
    ops = [make(OrderOp, (2 * i, 2 * i + 1, a[0], a[1], a[2], None)) for i, a in enumerate(row)]
    return device_memory(ops, memory, {}, 0)


class Uniform:
    """The same StageMemory for every stage (e.g. one byte per block: a count)."""

    def __init__(self, stage: StageMemory) -> None:
        self.stage = stage

    def __getitem__(self, s: int) -> StageMemory:
        return self.stage


BLOCKS = Uniform(StageMemory(kept=1.0))   # count blocks


def _event(effect: str, st: StageMemory, o):
    """(order at equal times: 0 frees first, 1 allocates; effect) of one table effect
    of op `o`, or None when it does nothing on this stage."""
    if effect in ("alloc", "swap_in"):
        return 1, effect
    if effect in ("swap_out", "free"):
        return 0, effect
    if effect == "remat":
        return (1, effect) if st.remat else None
    if st.held_for_weight_grad is not None:      # input_grad
        return (1 if st.held_for_weight_grad > st.kept + st.remat else 0), "input_grad_hold"
    return (0, "input_grad_free") if st.freed_by_input_grad else None


INBOX_EFFECTS = {"put": 1, "take_input": -1, "take_grad": -1, "release_grad": -1}   # the inbox column's, signed


def measured_effect(effect: str, block: tuple[float, float] | None, nbytes: float, host_bytes: float = 0.0):
    """One effect of the table's memory (or inbox) column sized as measured, not from
    a StageMemory: what the runtime's MemoryLedger applies. `block`: the (device,
    host) bytes of the action's block (host: offloaded or swapped out), None before
    its alloc -> (device change, host change, the block after; None once freed).
    The same effects as Levels.apply: alloc (the block is `nbytes`, `host_bytes`),
    swap_out / swap_in (`nbytes` move to host / back), remat (`nbytes` more),
    input_grad (the block becomes what W reads, `nbytes` and `host_bytes`, as
    input_grad_hold does), free (all of it goes); and the inbox's: `nbytes` put
    into it, or taken or released from it (INBOX_EFFECTS)."""
    dev, host = block if block is not None else (0.0, 0.0)
    if effect in INBOX_EFFECTS:
        return INBOX_EFFECTS[effect] * nbytes, 0.0, block
    if effect in ("alloc", "input_grad"):
        return nbytes - dev, host_bytes - host, (nbytes, host_bytes)
    if effect == "swap_out":
        moved = min(nbytes, dev)
        return -moved, moved, (dev - moved, host + moved)
    if effect == "swap_in":
        back = min(nbytes, host)
        return back, -back, (dev + back, host - back)
    if effect == "remat":
        return nbytes, 0.0, (dev + nbytes, host)
    if effect == "free":
        return -dev, -host, None
    raise ValueError(f"unknown memory effect {effect!r}")


def _block_events(ops, memory):
    """Every op's memory effects (the table's column), sorted by time, frees first."""
    has_w = split_blocks((o.stage, o.kind, o.microbatch) for o in ops)
    events = []  # (time, order, what, op): order 0 = free first at equal times
    effects: dict[tuple, list] = {}    # (kind, split, stage) -> (at start, order, what) of each effect
    for o in ops:
        key = (o.kind, (o.stage, o.microbatch) in has_w, o.stage)
        found = effects.get(key)
        if found is None:
            st = memory[o.stage]
            found = effects[key] = [(at == "start", *e) for at, effect in KINDS[effective_kind(*key[:2])].memory
                                    if (e := _event(effect, st, o)) is not None]
        for at_start, order, what in found:
            events.append((o.start if at_start else o.end, order, what, o))
    events.sort(key=itemgetter(0, 1))
    return events, has_w


class Levels:
    """The fold's state: each block's resident and swapped bytes, their total, the
    blocks in flight; `apply` one effect (_event's names) of an op at a time."""

    def __init__(self, memory) -> None:
        self.memory = memory
        self.size: dict[tuple[int, int], float] = {}
        self.resident: dict[tuple[int, int], float] = {}
        self.swapped: dict[tuple[int, int], float] = {}
        self.total = 0.0
        self.inflight = 0

    def apply(self, what: str, o) -> None:
        """Long: each effect of the table's memory column, side by side."""
        key = (o.stage, o.microbatch)
        st = self.memory[o.stage]
        resident, swapped = self.resident, self.swapped
        if what == "alloc":
            self.size[key] = st.kept if o.bytes is None else o.bytes
            resident[key] = self.size[key]
            self.total += self.size[key]
            self.inflight += 1
        elif what == "swap_out":
            moved = o.bytes if o.bytes is not None else st.swap_fraction * self.size.get(key, st.kept)
            moved = min(moved, resident.get(key, 0.0))
            resident[key] = resident.get(key, 0.0) - moved
            swapped[key] = swapped.get(key, 0.0) + moved
            self.total -= moved
        elif what == "swap_in":
            back = swapped.pop(key, 0.0)
            resident[key] = resident.get(key, 0.0) + back
            self.total += back
        elif what == "remat":
            resident[key] = resident.get(key, 0.0) + st.remat
            self.total += st.remat
        elif what == "input_grad_hold":
            self.total += st.held_for_weight_grad - resident.get(key, 0.0)
            resident[key] = st.held_for_weight_grad
        elif what == "input_grad_free":
            freed = min(st.freed_by_input_grad, resident.get(key, 0.0))
            resident[key] = resident.get(key, 0.0) - freed
            self.total -= freed
        else:   # free
            self.total -= resident.pop(key, 0.0)
            swapped.pop(key, None)
            self.inflight = max(0, self.inflight - 1)

    def apply_all(self, o, split: bool) -> None:
        """Every effect of op `o` in the table's order (an order's clock: no ties)."""
        st = self.memory[o.stage]
        for _, effect in KINDS[effective_kind(o.kind, split)].memory:
            found = _event(effect, st, o)
            if found is not None:
                self.apply(found[1], o)


def block_levels(st: StageMemory, kinds=(Kind.F, Kind.I, Kind.W)) -> tuple[tuple[float, ...], ...]:
    """One block's resident bytes after each memory effect of each of `kinds` in
    turn (the fold over one split backward: F, I, W), one tuple per kind: what a
    chooser that caps a device's memory charges each action (its rise above the
    level before it, and what it leaves)."""
    levels = Levels(Uniform(st))
    out = []
    for k in kinds:
        op = OrderOp(0.0, 0.0, 0, k, 0)
        steps = []
        for _, effect in KINDS[effective_kind(k, True)].memory:
            found = _event(effect, st, op)
            if found is not None:
                levels.apply(found[1], op)
            steps.append(levels.total)
        out.append(tuple(steps))
    return tuple(out)


def _levels(events, memory):
    """Step function of resident block bytes, its peak, and the peak block count."""
    state = Levels(memory)
    peak, peak_n = 0.0, 0
    scale = max([1.0] + [memory[s].kept for s in {o.stage for *_, o in events}])
    mem: list[tuple[float, float]] = [(0.0, 0.0)]
    tiny = 1e-6 * scale
    for t, _, what, o in events:
        state.apply(what, o)
        total = state.total
        if -tiny < total < tiny:
            total = state.total = max(total, 0.0)
        if total > peak:      # max(), inline: the fold runs in the cap search's loop
            peak = total
        if state.inflight > peak_n:
            peak_n = state.inflight
        if mem and mem[-1][0] == t:
            mem[-1] = (t, total)
        else:
            mem.append((t, total))
    return peak, peak_n, tuple(mem)


def fold_levels(events) -> tuple[float, float]:
    """(final level, peak) of (time, order, delta) events, sorted by time, frees
    (order 0) first, then as listed: the sum every figure above ends in."""
    level = peak = 0.0
    for _, _, delta in sorted(events, key=itemgetter(0, 1)):
        level += delta
        peak = max(peak, level)
    return level, peak


def _held(steps, ops, memory, all_starts, num_stages: int) -> float:
    """Peak of the block step function plus the inbox (frees first at equal times):
    F takes its input at its start, B its gradient at its end, a split
    backward's W releases it (the inbox rule of schedules/actions.py)."""
    events = []
    prev = 0.0
    for t, total in steps:
        events.append((t, 0 if total < prev else 1, total - prev))
        prev = total
    if not all_starts and num_stages <= 1:    # an order's fold (order_memory): no inbox to add
        return fold_levels(events)[1]
    start = {(o.stage, o.kind, o.microbatch): o.start for o in ops}
    # where the gradient is let go: the end of W, else of B (an I without a W is a B)
    release = {(o.stage, o.microbatch): o.end for o in ops if o.kind in BACKWARD_INPUT_KINDS}
    release.update({(o.stage, o.microbatch): o.end for o in ops if o.kind == Kind.W})
    for s in sorted({o.stage for o in ops}):
        st = memory[s]
        for x in sorted({o.microbatch for o in ops if o.stage == s}):
            if s > 0 and (s - 1, Kind.F, x) in all_starts and (s, Kind.F, x) in start:
                events.append((all_starts[(s - 1, Kind.F, x)], 1, st.inbox_input))
                events.append((start[(s, Kind.F, x)], 0, -st.inbox_input))
            if s < num_stages - 1:
                up = _backward_input_start(all_starts, s + 1, x)
                mine = _backward_input_start(start, s, x)
                if up is not None and mine is not None:   # held to B's end, or W's (split)
                    events.append((up, 1, st.inbox_grad))
                    events.append((release[(s, x)], 0, -st.inbox_grad))
    return fold_levels(events)[1]


def _backward_input_start(starts, stage: int, microbatch: int):
    for kind in BACKWARD_INPUT_KINDS[::-1]:     # I, else B
        t = starts.get((stage, kind, microbatch))
        if t is not None:
            return t
    return None
