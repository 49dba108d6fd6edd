"""Timeline: what happened (simulated or measured) and every statistic derived from it.

Statistics come from op records alone (`Timeline.from_ops`), so a timeline the
engine measures gets exactly the same bubbles, peaks and drawings as a simulated one.

Per stage, over [0, makespan], the compute stream (F, B, W) is either busy or idle;
idle intervals are classified by position (the paper's section-2 definitions):
  idle_before      before the first compute op
  warmup_bubble    between forwards before the first backward
  forward_bubble   between the last warm-up forward and the first backward
  backward_bubble  between the first and the last backward
  idle_after       after the last backward (drain)
so compute + all five = makespan. `recompute` is the part of `compute` spent
re-running forwards inside backwards. `comm_wait` (overlapping the idle figures,
it says why a stage idled) is the time a compute op waited after all its compute
inputs (F(s-1,x), B(s+1,x)) had finished: p2p transfers, swap-ins, launch delays.
`swap` is the busy time of the stage's host links (SO + SI).
Memory (activations only): F allocates its kept bytes at its start, SO frees the
swapped part at its end, SI re-allocates it at its start, and the micro-batch's
remaining bytes are freed at the end of its B (or of its W when there is one).
At equal times frees come before allocations (a stream frees before it reuses).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from schedules.errors import ScheduleError
from schedules.ir import Action, Kind

COMPUTE = (Kind.F, Kind.B, Kind.W)
STAT_FIELDS = ("compute", "recompute", "forward_bubble", "backward_bubble", "comm_wait", "swap",
               "peak_activation_bytes", "peak_inflight_microbatches")
EXTRA_FIELDS = ("warmup_bubble", "idle_before", "idle_after")


@dataclass(frozen=True)
class OpRecord:
    stage: int
    action: str          # "F3", "SO3", ...
    kind: Kind
    microbatch: int
    start: float
    end: float
    recompute: float = 0.0       # leading part of a B spent recomputing
    bytes: float | None = None   # memory this op allocates or frees; None = from the stage's figures

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", Kind(self.kind))
        if not self.end >= self.start:
            raise ScheduleError(f"op {self.action} on stage {self.stage} ends ({self.end}) before it starts ({self.start})")
        if self.recompute < 0 or self.recompute > self.end - self.start + 1e-9:
            raise ScheduleError(f"op {self.action} on stage {self.stage}: recompute {self.recompute} outside its duration")

    @classmethod
    def of(cls, action: Action, start: float, end: float, recompute: float = 0.0,
           bytes: float | None = None) -> "OpRecord":
        return cls(action.stage, str(action), action.kind, action.microbatch, float(start), float(end),
                   float(recompute), bytes)

    @property
    def duration(self) -> float:
        return self.end - self.start


@dataclass(frozen=True)
class StageStats:
    compute: float = 0.0
    recompute: float = 0.0
    forward_bubble: float = 0.0
    backward_bubble: float = 0.0
    comm_wait: float = 0.0
    swap: float = 0.0
    peak_activation_bytes: float = 0.0
    peak_inflight_microbatches: int = 0
    warmup_bubble: float = 0.0
    idle_before: float = 0.0
    idle_after: float = 0.0

    @property
    def idle(self) -> float:
        return (self.idle_before + self.warmup_bubble + self.forward_bubble
                + self.backward_bubble + self.idle_after)


@dataclass(frozen=True)
class Timeline:
    makespan: float
    ops: tuple[OpRecord, ...]
    stages: tuple[StageStats, ...]
    memory: tuple[tuple[tuple[float, float], ...], ...] = field(default=())
    name: str = ""

    @property
    def num_stages(self) -> int:
        return len(self.stages)

    def stage_ops(self, stage: int) -> list[OpRecord]:
        return [op for op in self.ops if op.stage == stage]

    def op(self, stage: int, action: str) -> OpRecord:
        for o in self.ops:
            if o.stage == stage and o.action == action:
                return o
        raise KeyError(f"no op {action} on stage {stage}")

    @classmethod
    def from_ops(cls, num_stages: int, ops, kept_bytes_per_stage=None, swap_fraction_per_stage=None,
                 name: str = "", origin: float | None = None) -> "Timeline":
        """Build a timeline and all its statistics from op records alone.

        kept_bytes_per_stage: activation bytes one F keeps on each stage (0 if None);
        swap_fraction_per_stage: beta, the share an SO moves to host (0 if None). An op's
        own `bytes` overrides the stage figure. Times are shifted so the first op starts
        at `origin` (default: the earliest start), which makes measured clocks comparable.
        """
        ops = list(ops)
        p = num_stages
        if p < 1:
            raise ScheduleError(f"number of stages must be >= 1, got {p}")
        for o in ops:
            if not 0 <= o.stage < p:
                raise ScheduleError(f"op {o.action} names stage {o.stage} of a {p}-stage timeline")
        kept = tuple(float(b) for b in (kept_bytes_per_stage or (0.0,) * p))
        beta = tuple(float(b) for b in (swap_fraction_per_stage or (0.0,) * p))
        if len(kept) != p or len(beta) != p:
            raise ScheduleError(f"per-stage bytes/fractions need {p} entries")
        t0 = min((o.start for o in ops), default=0.0) if origin is None else origin
        ops = [OpRecord(o.stage, o.action, o.kind, o.microbatch, o.start - t0, o.end - t0, o.recompute, o.bytes)
               for o in ops]
        ops.sort(key=lambda o: (o.start, o.end, o.stage, o.action))
        makespan = max((o.end for o in ops), default=0.0)
        index = {(o.stage, o.kind, o.microbatch): o for o in ops}
        stats, memory = [], []
        for s in range(p):
            mine = [o for o in ops if o.stage == s]
            st, mem = _stage_stats(s, p, mine, index, makespan, kept[s], beta[s])
            stats.append(st)
            memory.append(mem)
        return cls(makespan, tuple(ops), tuple(stats), tuple(memory), name)

    # ---- JSON (design.md "Simulation JSON"; extra keys allowed) ----
    def to_json(self) -> dict:
        stages = []
        for s, st in enumerate(self.stages):
            d = {k: getattr(st, k) for k in STAT_FIELDS + EXTRA_FIELDS}
            d["ops"] = [{"action": o.action, "start": o.start, "end": o.end,
                         **({"recompute": o.recompute} if o.recompute else {}),
                         **({"bytes": o.bytes} if o.bytes is not None else {})}
                        for o in self.stage_ops(s)]
            d["memory"] = [list(pt) for pt in self.memory[s]] if self.memory else []
            stages.append(d)
        return {"format": "obscura-timeline/1", "name": self.name, "makespan": self.makespan,
                "num_stages": self.num_stages, "stages": stages}

    @classmethod
    def from_json(cls, data) -> "Timeline":
        try:
            if not isinstance(data, dict):
                raise TypeError("top level is not an object")
            ops, stats, memory = [], [], []
            for s, d in enumerate(data["stages"]):
                for o in d["ops"]:
                    a = Action.parse(str(o["action"]), s)
                    ops.append(OpRecord.of(a, float(o["start"]), float(o["end"]),
                                           float(o.get("recompute", 0.0)),
                                           None if o.get("bytes") is None else float(o["bytes"])))
                vals = {k: d.get(k, 0) for k in STAT_FIELDS + EXTRA_FIELDS}
                vals = {k: (int(v) if k == "peak_inflight_microbatches" else float(v)) for k, v in vals.items()}
                stats.append(StageStats(**vals))
                memory.append(tuple((float(t), float(b)) for t, b in d.get("memory", [])))
            ops.sort(key=lambda o: (o.start, o.end, o.stage, o.action))
            return cls(float(data["makespan"]), tuple(ops), tuple(stats), tuple(memory), str(data.get("name", "")))
        except ScheduleError:
            raise
        except (KeyError, TypeError, ValueError) as e:
            raise ScheduleError(f"malformed simulation JSON: {type(e).__name__}: {e}") from None


def idle_intervals(ops, makespan: float) -> list[tuple[float, float, str]]:
    """(start, end, label) of every idle stretch of one stage's compute stream over
    [0, makespan]; labels are EXTRA_FIELDS / forward_bubble / backward_bubble names."""
    seq = sorted((o for o in ops if o.kind in COMPUTE), key=lambda o: (o.start, o.end))
    if not seq:
        return [(0.0, makespan, "idle_before")] if makespan > 0 else []
    bs = [o for o in seq if o.kind == Kind.B]
    first_b = min((o.start for o in bs), default=makespan)
    last_b = max((o.end for o in bs), default=makespan)
    out = []
    prev_end = 0.0
    for i, o in enumerate(seq):
        if o.start > prev_end:
            if i == 0:
                out.append((prev_end, o.start, "idle_before"))
            elif o.start <= first_b:
                out.append((prev_end, o.start, "forward_bubble" if o.start == first_b else "warmup_bubble"))
            else:
                # a gap straddling the last backward's end counts only up to it
                cut = max(prev_end, min(o.start, last_b))
                if cut > prev_end:
                    out.append((prev_end, cut, "backward_bubble"))
                if o.start > cut:
                    out.append((cut, o.start, "idle_after"))
        prev_end = max(prev_end, o.end)
    if makespan > prev_end:
        out.append((prev_end, makespan, "idle_after"))
    return out


def _stage_stats(s, p, ops, index, makespan, kept, beta) -> tuple[StageStats, tuple]:
    compute = [o for o in ops if o.kind in COMPUTE]
    idle = dict.fromkeys(EXTRA_FIELDS + ("forward_bubble", "backward_bubble"), 0.0)
    for a, b, label in idle_intervals(compute, makespan):
        idle[label] += b - a
    comm_wait, prev_end = 0.0, 0.0
    for o in sorted(compute, key=lambda o: (o.start, o.end)):
        comm_wait += _comm_wait(o, prev_end, index, p)
        prev_end = max(prev_end, o.end)
    peak_bytes, peak_inflight, mem = _memory(ops, kept, beta)
    return StageStats(compute=sum(o.duration for o in compute),
                      recompute=sum(o.recompute for o in compute),
                      forward_bubble=idle["forward_bubble"], backward_bubble=idle["backward_bubble"],
                      comm_wait=comm_wait,
                      swap=sum((o.duration for o in ops if o.kind in (Kind.SO, Kind.SI)), 0.0),
                      peak_activation_bytes=peak_bytes, peak_inflight_microbatches=peak_inflight,
                      warmup_bubble=idle["warmup_bubble"], idle_before=idle["idle_before"],
                      idle_after=idle["idle_after"]), mem


def _comm_wait(o: OpRecord, prev_end: float, index, p: int) -> float:
    if o.kind == Kind.F:
        deps = [index.get((o.stage - 1, Kind.F, o.microbatch))] if o.stage > 0 else []
    elif o.kind == Kind.B:
        deps = [index.get((o.stage + 1, Kind.B, o.microbatch))] if o.stage < p - 1 else []
        deps.append(index.get((o.stage, Kind.F, o.microbatch)))
    else:
        deps = [index.get((o.stage, Kind.B, o.microbatch))]
    ready = max([prev_end] + [d.end for d in deps if d is not None])
    return max(0.0, o.start - ready)


def _memory(ops, kept, beta):
    """Step function of resident activation bytes, its peak, and peak in-flight count."""
    has_w = {o.microbatch for o in ops if o.kind == Kind.W}
    size: dict[int, float] = {}
    events = []  # (time, order, kind, op): order 0 = free first at equal times
    for o in ops:
        if o.kind == Kind.F:
            size[o.microbatch] = kept if o.bytes is None else o.bytes
            events.append((o.start, 1, "alloc_mb", o))
        elif o.kind == Kind.SO:
            events.append((o.end, 0, "swap_out", o))
        elif o.kind == Kind.SI:
            events.append((o.start, 1, "swap_in", o))
        elif (o.kind == Kind.W) or (o.kind == Kind.B and o.microbatch not in has_w):
            events.append((o.end, 0, "free_mb", o))
    events.sort(key=lambda e: (e[0], e[1]))
    resident: dict[int, float] = {}
    swapped: dict[int, float] = {}
    total, inflight, peak, peak_n = 0.0, 0, 0.0, 0
    mem: list[tuple[float, float]] = [(0.0, 0.0)]
    for t, _, what, o in events:
        x = o.microbatch
        if what == "alloc_mb":
            resident[x] = size[x]
            total += size[x]
            inflight += 1
        elif what == "swap_out":
            moved = (o.bytes if o.bytes is not None else beta * size.get(x, kept))
            moved = min(moved, resident.get(x, 0.0))
            resident[x] = resident.get(x, 0.0) - moved
            swapped[x] = swapped.get(x, 0.0) + moved
            total -= moved
        elif what == "swap_in":
            back = swapped.pop(x, 0.0)
            resident[x] = resident.get(x, 0.0) + back
            total += back
        else:
            total -= resident.pop(x, 0.0)
            swapped.pop(x, None)
            inflight = max(0, inflight - 1)
        total = max(total, 0.0) if abs(total) < 1e-6 * max(1.0, kept) else total
        peak = max(peak, total)
        peak_n = max(peak_n, inflight)
        if mem and mem[-1][0] == t:
            mem[-1] = (t, total)
        else:
            mem.append((t, total))
    return peak, peak_n, tuple(mem)
