"""The memory check: every device's bytes, estimated from the accounting the planner
and the summary share, against what the device's allocator can hold, before any
work (docs/design.md, "Memory on a device"; the terms: obscura_jax.run.stage_bytes).

A device's estimate is the largest of the run's phases on it:

    steps        weights + activations + working + runtime
                 activations: the one memory fold (schedules.memory) over the run's
                 issue order, the held peak (residual blocks and inbox) of each
                 pipeline device's stages folded together (a V schedule's chunks
                 peak at different times), summed over the pipeline devices it
                 runs (stages sharing one GPU); working: the largest of
                 their programs' scratch and uncounted outputs (one program is
                 dispatched at a time: XLA frees its scratch once it is enqueued)
    measurement  weights + what timing one stage's programs holds (the largest)
    update       weights + the optimizer step's scratch and outputs (the largest)
    restore      weights + the restored params and optimizer state (--resume)

each plus the allocator's share, ALLOCATOR_SHARE of the rest: BFC hands a free chunk
out whole when splitting it would leave less than the request (or 128 MiB), and
rounds every allocation up, and both grow as the pool fills: the H200 runs of
results/h200 held up to 0.07% more than every buffer counted at 40-70% of the pool,
and a run admitted at 95% of its pool (tests/gpu/test_memory_gpu.py) 1.9% (H200) and
2.05% (H100) more (docs/design.md, "Memory on a device").

The check runs before compiling (traced figures, no scratch: a run whose weights and
activations alone exceed the limit is refused within seconds), after compiling,
before any array is placed (XLA's own sizes), and once more in the issue order the
measured costs give, before the first step (the inbox term follows the order). A device over its limit is
refused in one line naming the device, the estimate, the limit, the largest term and
what to reduce; `force` tries anyway. The limit: --device-memory, else the device's
memory_stats()["bytes_limit"], else (a GPU that reports none) what the
XLA_PYTHON_CLIENT_* variables give of its memory (allocator_limit).
"""
from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass

from obscura_jax.checkpoints.directory import warn
from obscura_jax.errors import RunError
from obscura_jax.run import stage_bytes
from obscura_jax.run.data import BatchShape
from obscura_jax.runtime.out_of_memory import DeviceOutOfMemory
from obscura_jax.runtime.pipeline import boundary_device_bytes, boundary_specs
from schedules.costs import StageCosts
from schedules.memory import OrderOp, device_memory
from schedules.simulator import stage_memory
from schedules.sizes import format_bytes

ALLOCATOR_SHARE = 0.03
DEFAULT_MEM_FRACTION = 0.75        # XLA's GPU pool without XLA_PYTHON_CLIENT_MEM_FRACTION
ADVICE = {"weights": "spread the model over more stages or devices (--stages, --tensor-parallel) or use fewer "
                     "--layers",
          "activations": "reduce --microbatches, recompute more (--policy / --schedule obscura / a plan) or swap "
                         "(--swap-fraction)",
          "working": "reduce --micro-batch-size or --seq-len (XLA's scratch grows with them)",
          "runtime": "reduce --microbatches",
          "measurement": "reduce --micro-batch-size or --seq-len",
          "update": "spread the model over more stages or devices (--stages, --tensor-parallel)",
          "restore": "spread the model over more stages or devices (--stages, --tensor-parallel)",
          "resident": "free what earlier runs of this process left on the device, or run it in a process of its own"}
TERM_NAMES = {"weights": "weights (params, grads, optimizer state)", "activations": "activations",
              "working": "XLA scratch and program outputs", "runtime": "tokens, targets and losses",
              "measurement": "cost measurement", "update": "optimizer step", "restore": "restored copy",
              "allocator": "allocator share", "resident": "arrays already on the device"}
PHASES = {"steps": "", "measurement": " while measuring costs", "update": " in the optimizer step",
          "restore": " while restoring the checkpoint"}


class MemoryCheckError(RunError):
    """A run that cannot fit a device (the one line says which, and why)."""


@dataclass(frozen=True)
class DeviceEstimate:
    """What one device holds at the run's peak phase, term by term."""
    device: str                              # "gpu:0"
    stages: tuple[int, ...]
    phase: str                               # the peak phase (a key of PHASES)
    phase_terms: tuple                       # (phase, ((term, bytes), ...: allocator last)) for every phase
    limit: float | None = None
    limit_source: str = "unknown"
    compiled: bool = False

    @property
    def terms(self) -> tuple[tuple[str, float], ...]:
        """The peak phase's terms."""
        return dict(self.phase_terms)[self.phase]

    @property
    def total(self) -> float:
        return sum(v for _, v in self.terms)

    def largest(self, phase: str | None = None) -> tuple[str, float]:
        """The largest term (of `phase`, default the peak phase), the allocator's share apart."""
        return self.ranked(phase)[0]

    def ranked(self, phase: str | None = None) -> list[tuple[str, float]]:
        """The terms of `phase` (default the peak phase), largest first, the allocator's share apart."""
        terms = dict(self.phase_terms)[phase or self.phase]
        return sorted(((k, v) for k, v in terms if k != "allocator"), key=lambda kv: -kv[1])

    def advice(self, phase: str | None = None) -> str:
        """What to reduce: for the largest term, and for the next when the weights
        lead (what a run reduces without changing its model)."""
        ranked = [k for k, v in self.ranked(phase) if v > 0]
        said = [ADVICE[ranked[0]]]
        if ranked[0] == "weights" and len(ranked) > 1:
            said.append(ADVICE[ranked[1]])
        return "; or ".join(said)

    @property
    def fits(self) -> bool:
        return self.limit is None or self.total <= self.limit

    def stage_text(self) -> str:
        s = self.stages
        if len(s) == 1:
            return f"stage {s[0]}"
        return f"stages {s[0]}-{s[-1]}" if list(s) == list(range(s[0], s[-1] + 1)) else \
            "stages " + ", ".join(map(str, s))

    def refusal(self) -> str:
        """The one line that refuses the run on this device."""
        name, nbytes = self.largest()
        return (f"device {self.device} needs ~{format_bytes(self.total)}{PHASES[self.phase]} ({self.stage_text()}: "
                f"{TERM_NAMES[name]} {format_bytes(nbytes)} {'are' if name in ('weights', 'activations', 'resident') else 'is'} "
                f"the largest term) but its allocator holds {format_bytes(self.limit)} ({self.limit_source}); "
                f"{self.advice()}, or give --force to try anyway")

    def to_json(self) -> dict:
        return {"device": self.device, "stages": list(self.stages), "predicted_bytes": self.total,
                "phase": self.phase, "terms": dict(self.terms),
                "phases": {k: sum(v for _, v in terms) for k, terms in self.phase_terms},
                "limit_bytes": self.limit, "limit_source": self.limit_source, "compiled": self.compiled}


def device_name(device) -> str:
    return f"{device.platform}:{device.id}"


def held_peaks(schedule, order, stage_bytes: dict, boundary) -> dict[tuple[int, ...], float]:
    """The held peak (residual blocks and inbox) of each pipeline device's local stages,
    keyed by those stages, by the one memory fold over the issue order
    (schedules.memory.order_memory's clock: the i-th action starts at 2i and ends at
    2i + 1), the order the engine's ledger settles in. The stages of one pipeline device
    (a V schedule's two chunks) are folded together, as the planner's simulator folds
    them: their peaks fall at different times."""
    p = schedule.num_stages
    got = lambda key, s, default=0.0: getattr(stage_bytes[s], key) if s in stage_bytes else default  # noqa: E731
    held = [got("weight_grad_held", s, None) for s in range(p)]
    costs = StageCosts(fwd=(1.0,) * p, bwd=(1.0,) * p, act_bytes=tuple(got("act", s) for s in range(p)),
                       act_bytes_recompute=tuple(got("act_recompute", s) for s in range(p)),
                       boundary_bytes=tuple(boundary),
                       weight_grad_held=(tuple(h if h is not None else got("act_recompute", s)
                                               for s, h in enumerate(held))
                                         if any(h is not None for h in held) else ()))
    memory = stage_memory(schedule, costs)
    ops = [OrderOp(2 * i, 2 * i + 1, a.stage, a.kind, a.microbatch) for i, a in enumerate(order)]
    starts = {(o.stage, o.kind, o.microbatch): o.start for o in ops}
    groups = {}
    for s in sorted(stage_bytes):
        groups.setdefault(schedule.stage_to_device[s], []).append(s)
    return {tuple(mine): device_memory([o for o in ops if o.stage in mine], memory, starts, p).peak_held_bytes
            for mine in groups.values()}


def estimate(schedule, order, stage_bytes: dict, boundary, devices_of: dict, *, resume: bool = False,
             limits: dict | None = None, resident: dict | None = None) -> list[DeviceEstimate]:
    """One DeviceEstimate per device: `stage_bytes[s]` (StageBytes of the local stages),
    `boundary[s]` every stage's output bytes, `devices_of[s]` the names of the devices
    stage s holds here, `limits[name]` (bytes or None, source), `resident[name]` the
    bytes already in use on it before the run (earlier runs of this process)."""
    held = held_peaks(schedule, order, stage_bytes, boundary)
    by_device: dict[str, list[int]] = {}
    for s in sorted(stage_bytes):
        for name in devices_of[s]:
            by_device.setdefault(name, []).append(s)
    out = []
    for name, mine in by_device.items():
        rows = [stage_bytes[s] for s in mine]
        weights = sum(r.weights for r in rows)
        activations = sum(v for group, v in held.items() if set(group) <= set(mine))
        phases = {"steps": [("weights", weights), ("activations", activations),
                            ("working", max(r.working for r in rows)), ("runtime", sum(r.runtime for r in rows))],
                  "measurement": [("weights", weights), ("measurement", max(r.measure for r in rows))],
                  "update": [("weights", weights), ("update", max(r.update for r in rows))]}
        if resume:
            phases["restore"] = [("weights", weights), ("restore", sum(r.params + r.optimizer for r in rows))]
        for terms in phases.values():
            if (resident or {}).get(name):
                terms.append(("resident", float(resident[name])))
            terms.append(("allocator", ALLOCATOR_SHARE * sum(v for _, v in terms)))
        totals = {k: sum(v for _, v in t) for k, t in phases.items()}
        phase = max(totals, key=lambda k: (totals[k], k == "steps"))
        limit, source = (limits or {}).get(name, (None, "unknown"))
        out.append(DeviceEstimate(name, tuple(mine), phase, tuple((k, tuple(t)) for k, t in phases.items()),
                                  limit, source, all(r.compiled for r in rows)))
    return out


def allocator_limit(device, declared: float | None, environ=os.environ) -> tuple[float | None, str]:
    """(bytes the device's allocator can hold, where that figure comes from): the
    declared --device-memory, the device's memory_stats()["bytes_limit"], or for a GPU
    that reports none, XLA's pool over its memory (env_limit); (None, "unknown")
    where nothing says (a CPU device)."""
    if declared is not None:
        return float(declared), "--device-memory"
    try:
        stats = device.memory_stats()
    except Exception:  # noqa: BLE001  backends without allocator statistics
        stats = None
    if stats and stats.get("bytes_limit"):
        return float(stats["bytes_limit"]), "memory_stats bytes_limit"
    if device.platform == "gpu":
        total = gpu_total_bytes(device)
        if total:
            return env_limit(total, environ)
    return None, "unknown"


def env_limit(total: float, environ=os.environ) -> tuple[float, str]:
    """What XLA's GPU client takes of a device of `total` bytes under the
    XLA_PYTHON_CLIENT_* variables: the platform allocator grows to the device's
    memory; otherwise the pool is MEM_FRACTION of it (0.75 by default), preallocated
    or not."""
    if environ.get("XLA_PYTHON_CLIENT_ALLOCATOR", "").lower() == "platform":
        return total, "XLA_PYTHON_CLIENT_ALLOCATOR=platform: the device's memory"
    raw = environ.get("XLA_PYTHON_CLIENT_MEM_FRACTION")
    try:
        fraction = float(raw) if raw else DEFAULT_MEM_FRACTION
    except ValueError:
        raise RunError(f"XLA_PYTHON_CLIENT_MEM_FRACTION must be a number, got {raw!r}") from None
    pre = environ.get("XLA_PYTHON_CLIENT_PREALLOCATE", "true")
    return fraction * total, f"XLA_PYTHON_CLIENT_MEM_FRACTION {fraction:g} of {format_bytes(total)}" + (
        ", not preallocated" if pre.lower() in ("false", "0") else "")


def gpu_total_bytes(device) -> float | None:
    """The GPU's memory from nvidia-smi (None when it cannot say)."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits",
                              "-i", str(device.local_hardware_id)], capture_output=True, text=True, timeout=20)
        return float(out.stdout.split()[0]) * 2 ** 20 if out.returncode == 0 else None
    except (OSError, subprocess.SubprocessError, ValueError, IndexError, AttributeError):
        return None


def device_peak(device) -> int | None:
    """The device's peak bytes in use since the process started (memory_stats), or None."""
    try:
        stats = device.memory_stats()
    except Exception:  # noqa: BLE001  backends without allocator statistics
        return None
    return int(stats["peak_bytes_in_use"]) if stats and "peak_bytes_in_use" in stats else None


def device_in_use(device) -> int:
    """Bytes in use on the device now (memory_stats; 0 where not reported)."""
    try:
        stats = device.memory_stats()
    except Exception:  # noqa: BLE001  backends without allocator statistics
        return 0
    return int(stats.get("bytes_in_use", 0)) if stats else 0


def verdict(estimates: list[DeviceEstimate], group) -> str | None:
    """The first refusal line of any process (the same on every process), or None."""
    mine = next((e.refusal() for e in estimates if not e.fits), None)
    if mine is not None and group.size > 1:
        mine = f"process {group.rank}: {mine}"
    return next((line for line in group.gather("memory check", mine) if line), None)


def explain(error: DeviceOutOfMemory, estimates: list[DeviceEstimate], group) -> DeviceOutOfMemory:
    """An out-of-memory with the run's estimate for its device beside the limit and
    what to reduce (its device's, else the largest estimate of this process)."""
    known = [e for e in estimates if e.device == error.device] or sorted(estimates, key=lambda e: -e.total)[:1]
    context = ""
    if known:
        e = known[0]
        phase = next((k for k, what in (("measurement", "cost measurement"), ("update", "optimizer step"))
                      if what in error.where), "steps")
        against = f" against its allocator's {format_bytes(e.limit)}" if e.limit is not None else ""
        short = "; the estimate fell short: please report it" if e.limit is not None and e.fits else ""
        context = (f"the run's estimate for {e.device} was ~{format_bytes(e.total)}{PHASES[e.phase]}{against}"
                   f"{short}; {e.advice(phase)}")
    return error.with_context(context, process=group.rank if group.size > 1 else None)


class RunMemory:
    """The check of one run as the trainer runs it: `verify()` before compiling (traced
    figures), `verify(pipe)` once the programs are compiled and before any array is
    placed; the estimates stay for the out-of-memory line (`explain`) and the
    summary (`to_json`)."""

    def __init__(self, run, cfg, schedule, partition, placement, group, optimizer, order):
        self.run, self.schedule, self.group, self.optimizer, self.order = run, schedule, group, optimizer, order
        p = schedule.num_stages
        owned = {s: [d for d in placement.mesh(s).devices if group.owns(d)] for s in range(p)}
        self.devices_of = {s: [device_name(d) for d in ds] for s, ds in owned.items() if ds}
        devices = {device_name(d): d for ds in owned.values() for d in ds}
        self.limits = {name: allocator_limit(d, run.device_memory) for name, d in devices.items()}
        self.resident = {name: device_in_use(d) for name, d in devices.items()}     # before the run places any
        shape = BatchShape(schedule.num_microbatches, run.micro_batch_size, run.seq_len)
        self.boundary = list(boundary_device_bytes(boundary_specs(cfg, partition, shape), placement)) + [0]
        self.policy = run.base_policy(cfg)      # --offload's ops are host bytes, not the device's
        self.traced = stage_bytes.traced(cfg, schedule, partition, self.policy, placement, shape, optimizer,
                                         sorted(self.devices_of))
        self.estimates: list[DeviceEstimate] = []
        self.everyone: list[dict] = []
        self.warned = False                 # the --force warning said (once a run)

    def verify(self, pipe=None) -> None:
        """Estimate every local device (from the compiled programs once `pipe` is
        given) and refuse the run in one line, the same on every process, unless forced."""
        rows = self.traced if pipe is None else stage_bytes.compiled(pipe, self.traced, self.optimizer,
                                                                     self.policy, self.run.measure_costs)
        order = self.order if pipe is None else pipe.executor.order
        self.estimates = estimate(self.schedule, order, rows, self.boundary, self.devices_of,
                                  resume=self.run.resume, limits=self.limits, resident=self.resident)
        line = verdict(self.estimates, self.group)
        if line is not None and not self.run.force_memory:
            raise MemoryCheckError(line)
        if line is not None and self.group.is_leader and not self.warned:
            warn(f"{line.split('; ')[0]}; --force: trying anyway")
            self.warned = True
        self.everyone = [d for part in self.group.gather("memory estimates", [e.to_json() for e in self.estimates])
                         for d in part]

    def explain(self, error: DeviceOutOfMemory) -> DeviceOutOfMemory:
        return explain(error, self.estimates, self.group)

    def to_json(self, measured: dict) -> dict:
        """Every device's estimate beside its measured peak (memory_stats, where known)."""
        rows = []
        for d in self.everyone:
            peak = measured.get(d["device"])
            rows.append({**d, "measured_peak_bytes": peak,
                         "predicted_over_measured": d["predicted_bytes"] / peak if peak else None})
        return {"checked": any(d["limit_bytes"] is not None for d in rows), "forced": self.run.force_memory,
                "allocator_share": ALLOCATOR_SHARE, "devices": rows}
