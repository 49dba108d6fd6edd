"""Timeline: what happened (simulated or measured) and every statistic derived from it.

Statistics come from op records alone (`Timeline.from_ops`), so a timeline the
engine measures gets exactly the same bubbles, peaks and drawings as a simulated one.

Statistics are per device: a device's compute stream runs the F, B, I and W of all
its stages (one stage per device, the paper's case, makes device d stage d, hence
the field's name `stages`; `devices` is the same tuple). Over [0, makespan] the
stream is either busy or idle; idle intervals are classified by position (the
paper's section-2 definitions):
  idle_before      before the first compute op
  warmup_bubble    between forwards before the first backward (B or I)
  forward_bubble   between the last warm-up forward and the first backward
  backward_bubble  between the first backward and the last backward or weight-grad
  idle_after       after that (drain)
so compute + all five = makespan. An iteration ends with the optimizer step after
the last action (`optimizer`, an OptimizerStep: measured, or the costs' per-stage
`optimizer` simulated); the iteration time is its end (the makespan without one).
BUBBLE_DEFINITION: `bubble_fraction` = device-seconds idle within the iteration
(a device is busy while it computes, recompute included, and while it steps its
optimizer) / (devices x iteration time); `recompute_fraction` is the recompute's
share of the same denominator (busy, but not useful work).
`recompute` is the part of `compute` spent re-running forwards inside backwards. `comm_wait` (overlapping the idle figures,
it says why a device idled) is the time a compute op waited after all its compute
inputs (schedules.deps, swap-ins left out) had finished and its stream was free:
p2p transfers, swap-ins, launch delays. `swap` is the busy time of the device's
host links (SO + SI). Memory: schedules.memory (the one accounting).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from operator import attrgetter
from typing import NamedTuple

from schedules.deps import dependencies
from schedules.actions import COMPUTE_KINDS
from schedules.errors import ScheduleError
from schedules.ir import BACKWARD_INPUT_KINDS, Action, Kind, action
from schedules.iteration import OptimizerStep
from schedules.memory import StageMemory, device_memory

COMPUTE = COMPUTE_KINDS
STAT_FIELDS = ("compute", "recompute", "forward_bubble", "backward_bubble", "comm_wait", "swap",
               "peak_activation_bytes", "peak_inflight_microbatches")
EXTRA_FIELDS = ("warmup_bubble", "idle_before", "idle_after", "peak_held_bytes")
BUBBLE_DEFINITION = ("device-seconds idle within the iteration (optimizer step included in the iteration) "
                     "/ (devices x iteration time)")


@dataclass(frozen=True)
class OpRecord:
    stage: int
    action: str          # "F3", "SO3", ... (the stage is the field above)
    kind: Kind
    microbatch: int
    start: float
    end: float
    recompute: float = 0.0       # leading part of a B or I spent recomputing
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

    @property
    def long(self) -> str:
        """torch's `_Action` form, stage first: '2F3'."""
        return f"{self.stage}{self.action}"


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
    peak_held_bytes: float = 0.0      # activations + inbox (schedules.memory)

    @property
    def idle(self) -> float:
        return (self.idle_before + self.warmup_bubble + self.forward_bubble
                + self.backward_bubble + self.idle_after)


@dataclass(frozen=True)
class Timeline:
    makespan: float
    ops: tuple[OpRecord, ...]
    stages: tuple[StageStats, ...]       # per device (see the module docstring)
    memory: tuple[tuple[tuple[float, float], ...], ...] = field(default=())   # per device
    name: str = ""
    stage_to_device: tuple[int, ...] = ()   # empty: stage d runs on device d
    optimizer: OptimizerStep | None = None  # None: the iteration ends with the last action

    def with_optimizer(self, seconds, end: float | None = None) -> "Timeline":
        """This timeline ending with an optimizer step (schedules.iteration.OptimizerStep.after)."""
        return replace(self, optimizer=OptimizerStep.after(self.makespan, self.num_devices, seconds, end))

    @property
    def iteration_time(self) -> float:
        """The optimizer step's end: the iteration time (the makespan without one)."""
        return self.optimizer.end if self.optimizer is not None else self.makespan

    def idle(self, device: int) -> float:
        """Device-seconds idle within the iteration: its idle figures over [0, makespan]
        and whatever of the rest it is not stepping its optimizer."""
        extra = 0.0
        if self.optimizer is not None:
            extra = self.optimizer.end - self.makespan - self.optimizer.seconds[device]
        return self.stages[device].idle + extra

    @property
    def devices(self) -> tuple[StageStats, ...]:
        return self.stages

    @property
    def num_devices(self) -> int:
        return len(self.stages)

    @property
    def num_stages(self) -> int:
        return len(self.stage_to_device) or len(self.stages)

    @property
    def one_stage_per_device(self) -> bool:
        return not self.stage_to_device

    @property
    def bubble_fraction(self) -> float:
        """BUBBLE_DEFINITION: device-seconds idle within the iteration (over [0,
        iteration_time], the optimizer step busy time) / (devices x iteration time).
        Recompute is busy time, so it is not in here; it is not useful work either:
        `recompute_fraction` counts it apart, and useful work is the rest
        (1 - bubble - recompute)."""
        total = self.iteration_time * self.num_devices
        return sum(self.idle(d) for d in range(self.num_devices)) / total if total > 0 else 0.0

    @property
    def recompute_fraction(self) -> float:
        """Share of the devices' time (devices x iteration time) spent recomputing
        forwards inside backwards."""
        total = self.iteration_time * self.num_devices
        return sum(st.recompute for st in self.stages) / total if total > 0 else 0.0

    def device_of(self, stage: int) -> int:
        return self.stage_to_device[stage] if self.stage_to_device else stage

    def stage_ops(self, stage: int) -> list[OpRecord]:
        return [op for op in self.ops if op.stage == stage]

    def device_ops(self, device: int) -> list[OpRecord]:
        return [op for op in self.ops if self.device_of(op.stage) == device]

    def label(self, op: OpRecord) -> str:
        """'F3' with one stage per device, torch's '2F3' otherwise."""
        return op.action if self.one_stage_per_device else op.long

    def op(self, stage: int, action: str) -> OpRecord:
        for o in self.ops:
            if o.stage == stage and o.action == action:
                return o
        raise KeyError(f"no op {action} on stage {stage}")

    @classmethod
    def from_ops(cls, num_stages: int, ops, kept_bytes_per_stage=None, swap_fraction_per_stage=None,
                 name: str = "", origin: float | None = None, *, stage_to_device=None,
                 memory=None) -> "Timeline":
        """Build a timeline and all its statistics from op records alone.

        kept_bytes_per_stage: activation bytes one F keeps on each stage (0 if None);
        swap_fraction_per_stage: beta, the share an SO moves to host (0 if None);
        memory: one schedules.memory.StageMemory per stage instead of those two (it
        also prices I's rematerialisation and frees, and the inbox). An op's own
        `bytes` overrides the stage figure. stage_to_device: where each stage runs
        (default stage s on device s). Times are shifted so the first op starts at
        `origin` (default: the earliest start), which makes measured clocks comparable.
        """
        ops = list(ops)
        p = num_stages
        if p < 1:
            raise ScheduleError(f"number of stages must be >= 1, got {p}")
        for o in ops:
            if not 0 <= o.stage < p:
                raise ScheduleError(f"op {o.action} names stage {o.stage} of a {p}-stage timeline")
        where = tuple(stage_to_device) if stage_to_device is not None else tuple(range(p))
        if len(where) != p or min(where) < 0 or set(where) != set(range(max(where) + 1)):
            raise ScheduleError(f"stage_to_device must map {p} stages onto devices 0..D-1, got {where!r}")
        mem = _stage_memory(p, kept_bytes_per_stage, swap_fraction_per_stage, memory)
        t0 = min((o.start for o in ops), default=0.0) if origin is None else origin
        if t0:
            ops = [OpRecord(o.stage, o.action, o.kind, o.microbatch, o.start - t0, o.end - t0, o.recompute, o.bytes)
                   for o in ops]
        ops.sort(key=_record_order)
        makespan = max((o.end for o in ops), default=0.0)
        index = {(o.stage, o.kind, o.microbatch): o for o in ops}
        starts = {(o.stage, o.kind, o.microbatch): o.start for o in ops}
        stats, steps = [], []
        for mine in _by_device(ops, where):
            st, mem_steps = _device_stats(mine, p, index, starts, makespan, mem)
            stats.append(st)
            steps.append(mem_steps)
        identity = where == tuple(range(p))
        return cls(makespan, tuple(ops), tuple(stats), tuple(steps), name, () if identity else where)

    # ---- JSON (design.md "Simulation JSON"; extra keys allowed) ----
    def to_json(self) -> dict:
        """One entry per device under "stages" (device d is stage d with one stage per
        device); with several stages on a device, ops print stage first ('2F3') and
        "stage_to_device" says where each stage runs."""
        stages = []
        for d, st in enumerate(self.stages):
            entry = {k: getattr(st, k) for k in STAT_FIELDS + EXTRA_FIELDS}
            entry["ops"] = [{"action": self.label(o), "start": o.start, "end": o.end,
                             **({"recompute": o.recompute} if o.recompute else {}),
                             **({"bytes": o.bytes} if o.bytes is not None else {})}
                            for o in self.device_ops(d)]
            entry["memory"] = [list(pt) for pt in self.memory[d]] if self.memory else []
            stages.append(entry)
        out = {"format": "obscura-timeline/1", "name": self.name, "makespan": self.makespan,
               "iteration_time": self.iteration_time,
               "bubble_fraction": self.bubble_fraction, "recompute_fraction": self.recompute_fraction,
               "num_stages": self.num_stages, "stages": stages}
        if self.optimizer is not None:
            out["optimizer"] = self.optimizer.to_json()
        if self.stage_to_device:
            out.update(num_devices=self.num_devices, stage_to_device=list(self.stage_to_device))
        return out

    @classmethod
    def from_json(cls, data) -> "Timeline":
        try:
            if not isinstance(data, dict):
                raise TypeError("top level is not an object")
            where = tuple(int(d) for d in data.get("stage_to_device", ()))
            ops, stats, memory = [], [], []
            for d, entry in enumerate(data["stages"]):
                for o in entry["ops"]:
                    a = Action.parse(str(o["action"]), None if where else d)
                    ops.append(OpRecord.of(a, float(o["start"]), float(o["end"]),
                                           float(o.get("recompute", 0.0)),
                                           None if o.get("bytes") is None else float(o["bytes"])))
                vals = {k: entry.get(k, 0) for k in STAT_FIELDS + EXTRA_FIELDS}
                vals = {k: (int(v) if k == "peak_inflight_microbatches" else float(v)) for k, v in vals.items()}
                stats.append(StageStats(**vals))
                memory.append(tuple((float(t), float(b)) for t, b in entry.get("memory", [])))
            ops.sort(key=_record_order)
            opt = data.get("optimizer")
            return cls(float(data["makespan"]), tuple(ops), tuple(stats), tuple(memory),
                       str(data.get("name", "")), where, None if opt is None else OptimizerStep.from_json(opt))
        except ScheduleError:
            raise
        except (KeyError, TypeError, ValueError) as e:
            raise ScheduleError(f"malformed simulation JSON: {type(e).__name__}: {e}") from None


class Span(NamedTuple):
    """One op as held_bytes_peaks reads it: the fields the accounting uses, first
    those Timeline.from_ops orders records by, so a plain sort orders them alike."""
    start: float
    end: float
    stage: int
    action: str          # "F3", ...: no two ops of a stage share it
    kind: Kind
    microbatch: int
    bytes: float | None = None


def held_bytes_peaks(num_stages: int, spans, memory, stage_to_device=None) -> tuple[float, tuple[float, ...]]:
    """(makespan, each device's peak_held_bytes) of ops (Spans) starting at 0: the
    figures Timeline.from_ops(num_stages, <the same ops as OpRecords>, origin=0.0,
    memory=memory, stage_to_device=...) reports, from the same accounting and op
    order, without the other statistics (what a search compares)."""
    where = tuple(stage_to_device) if stage_to_device is not None else tuple(range(num_stages))
    memory = _stage_memory(num_stages, None, None, memory)
    spans = sorted(spans)
    starts = {(o.stage, o.kind, o.microbatch): o.start for o in spans}
    peaks = tuple(device_memory(mine, memory, starts, num_stages).peak_held_bytes
                  for mine in _by_device(spans, where))
    return max((o.end for o in spans), default=0.0), peaks


_record_order = attrgetter("start", "end", "stage", "action")


def _by_device(ops, where) -> list[list[OpRecord]]:
    out: list[list[OpRecord]] = [[] for _ in range(max(where) + 1)]
    for o in ops:
        out[where[o.stage]].append(o)
    return out


def with_recompute_shares(timeline: Timeline, shares) -> Timeline:
    """The timeline with each backward (B, or I of a split one) of stage s marked as
    spending shares[s] of its duration recomputing: a measured timeline cannot see
    inside a backward, so its Gantt chart hatches the share the costs measured in the
    same run give (schedules.costs.StageCosts.recompute_share). Per-device
    `recompute` statistics follow; everything else is unchanged."""
    if len(shares) != timeline.num_stages:
        raise ScheduleError(f"{len(shares)} recompute shares for {timeline.num_stages} stages")
    ops = tuple(replace(o, recompute=float(shares[o.stage]) * o.duration)
                if o.kind in BACKWARD_INPUT_KINDS else o for o in timeline.ops)
    stats = tuple(replace(st, recompute=sum(o.recompute for o in ops if timeline.device_of(o.stage) == d))
                  for d, st in enumerate(timeline.stages))
    return replace(timeline, ops=ops, stages=stats)


def _stage_memory(p, kept, beta, memory) -> tuple[StageMemory, ...]:
    if memory is not None:
        memory = tuple(memory)
        if len(memory) != p or not all(isinstance(m, StageMemory) for m in memory):
            raise ScheduleError(f"memory needs one StageMemory per stage ({p})")
        return memory
    kept = tuple(float(b) for b in (kept or (0.0,) * p))
    beta = tuple(float(b) for b in (beta or (0.0,) * p))
    if len(kept) != p or len(beta) != p:
        raise ScheduleError(f"per-stage bytes/fractions need {p} entries")
    return tuple(StageMemory(kept=k, swap_fraction=b) for k, b in zip(kept, beta))


def idle_intervals(ops, makespan: float) -> list[tuple[float, float, str]]:
    """(start, end, label) of every idle stretch of one device's compute stream over
    [0, makespan]; labels are EXTRA_FIELDS / forward_bubble / backward_bubble names."""
    seq = sorted((o for o in ops if o.kind in COMPUTE), key=lambda o: (o.start, o.end))
    if not seq:
        return [(0.0, makespan, "idle_before")] if makespan > 0 else []
    first_b = min((o.start for o in seq if o.kind in BACKWARD_INPUT_KINDS), default=makespan)
    last_b = max((o.end for o in seq if o.kind != Kind.F), default=makespan)
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


def _device_stats(ops, p, index, starts, makespan, memory) -> tuple[StageStats, tuple]:
    compute = [o for o in ops if o.kind in COMPUTE]
    idle = dict.fromkeys(("warmup_bubble", "idle_before", "idle_after", "forward_bubble", "backward_bubble"), 0.0)
    for a, b, label in idle_intervals(compute, makespan):
        idle[label] += b - a
    comm_wait, prev_end = 0.0, 0.0
    for o in sorted(compute, key=lambda o: (o.start, o.end)):
        deps = [index.get(d) for d in dependencies(action(o.stage, o.kind, o.microbatch), index, p)
                if d.kind in COMPUTE]
        ready = max([prev_end] + [d.end for d in deps if d is not None])
        comm_wait += max(0.0, o.start - ready)
        prev_end = max(prev_end, o.end)
    prof = device_memory(ops, memory, starts, p)
    return StageStats(compute=sum(o.duration for o in compute),
                      recompute=sum(o.recompute for o in compute),
                      forward_bubble=idle["forward_bubble"], backward_bubble=idle["backward_bubble"],
                      comm_wait=comm_wait,
                      swap=sum((o.duration for o in ops if o.kind in (Kind.SO, Kind.SI)), 0.0),
                      peak_activation_bytes=prof.peak_activation_bytes,
                      peak_inflight_microbatches=prof.peak_inflight_microbatches,
                      warmup_bubble=idle["warmup_bubble"], idle_before=idle["idle_before"],
                      idle_after=idle["idle_after"], peak_held_bytes=prof.peak_held_bytes), prof.steps
