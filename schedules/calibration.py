"""Simulator realism fitted from the engine's own runs (obscura-calibration/1).

The simulator's ideal (perfect overlap, free launches, no optimizer) misses three
terms; a Calibration sets them on a StageCosts (`apply`):

    action_overhead        seconds added to every F, B, I, W (launch / dispatch)
    optimizer_s_per_byte   optimizer step: seconds per byte of a stage's weight_bytes
                           (params + grads + optimizer state), run after the flush
    link_sharing           share of a p2p link a swapping neighbour's copies take

`fit` takes engine runs (`RunSample`: the schedule the engine ran, the costs it
measured standalone in the same run, its measured iteration and optimizer seconds)
and fits action_overhead (least squares over the runs of measured - simulated, per
compute action) and optimizer_s_per_byte (median of optimizer seconds / weight
bytes). Terms the runs cannot show are kept at their given value and listed in
`assumed` (one GPU has no p2p link: link_sharing is assumed there). Every run is
predicted with `predict`: the one simulator (schedules.simulator), on one device
when the run shared one.

JSON: {"format": "obscura-calibration/1", "action_overhead": s, "optimizer_s_per_byte": s/B,
"link_sharing": 0..0.9, "assumed": [term, ...], "source": text, "fit": [{run row}, ...]}.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

from schedules.actions import COMPUTE_KINDS
from schedules.costs import StageCosts
from schedules.errors import ScheduleError
from schedules.generators import generate
from schedules.ir import Schedule
from schedules.formats.jsonio import load_document, write_json_atomic
from schedules.simulator import iteration_time, on_one_device

FORMAT = "obscura-calibration/1"
TERMS = ("action_overhead", "optimizer_s_per_byte", "link_sharing")
# What makes physical sense (docs/formats.md): a launch or dispatch costs microseconds
# to milliseconds, never a second; an optimizer step streams the weight state at a
# memory's speed, never slower than 1 MB/s; a neighbour's copies take at most 90% of
# a link.
BOUNDS = {"action_overhead": (1.0, "1 s"), "optimizer_s_per_byte": (1e-6, "1e-6 s/B (1 MB/s)"),
          "link_sharing": (0.9, "0.9")}


@dataclass(frozen=True)
class Calibration:
    action_overhead: float = 0.0
    optimizer_s_per_byte: float = 0.0
    link_sharing: float = 0.0
    assumed: tuple[str, ...] = TERMS
    source: str = ""
    fit: tuple = field(default=(), compare=False)

    def __post_init__(self) -> None:
        for name in TERMS:
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise ScheduleError(f"calibration {name} must be a finite number >= 0, got {v!r}")
        if self.link_sharing > 0.9:
            raise ScheduleError(f"calibration link_sharing must be in [0, 0.9], got {self.link_sharing}")
        unknown = sorted(set(self.assumed) - set(TERMS))
        if unknown:
            raise ScheduleError(f"calibration: unknown assumed term(s) {', '.join(unknown)} (terms: {', '.join(TERMS)})")
        object.__setattr__(self, "assumed", tuple(self.assumed))
        object.__setattr__(self, "fit", tuple(self.fit))

    def apply(self, costs: StageCosts) -> StageCosts:
        """`costs` with the calibration's terms set."""
        return costs.with_(action_overhead=self.action_overhead, link_sharing=self.link_sharing,
                           optimizer=tuple(self.optimizer_s_per_byte * w for w in costs.weight_bytes))

    def describe(self) -> str:
        """One line: the terms and which are assumed."""
        parts = [f"action overhead {self.action_overhead * 1e6:.1f} us",
                 f"optimizer {self.optimizer_s_per_byte * 1e12:.3f} s/TB of weight state",
                 f"link sharing {self.link_sharing:g}"]
        fitted = [t for t in TERMS if t not in self.assumed]
        return "; ".join(parts) + (f" (fitted: {', '.join(fitted) or 'none'}; assumed: "
                                   f"{', '.join(self.assumed) or 'none'})")

    def to_json(self) -> dict:
        return {"format": FORMAT, **{t: getattr(self, t) for t in TERMS}, "assumed": list(self.assumed),
                "source": self.source, "fit": list(self.fit)}


def calibration_from_json(d) -> Calibration:
    if not isinstance(d, dict):
        raise ScheduleError(f"a calibration must be a JSON object, got {type(d).__name__}")
    if d.get("format") != FORMAT:
        raise ScheduleError(f"not an {FORMAT} file (format is {d.get('format')!r})")
    assumed = d.get("assumed", list(TERMS))
    if not isinstance(assumed, list) or not all(isinstance(a, str) for a in assumed):
        raise ScheduleError("calibration 'assumed' must be a list of term names")
    if not isinstance(d.get("fit", []), list) or not all(isinstance(r, dict) for r in d.get("fit", [])):
        raise ScheduleError("calibration 'fit' must be a list of run objects")
    if not isinstance(d.get("source", ""), str):
        raise ScheduleError("calibration 'source' must be a string")
    for name, (high, text) in BOUNDS.items():      # a file is in seconds: physical bounds hold
        v = d.get(name, 0.0)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > high:
            raise ScheduleError(f"calibration {name} must be in [0, {text}], got {v!r}")
    return Calibration(**{t: d.get(t, 0.0) for t in TERMS}, assumed=tuple(assumed),
                       source=str(d.get("source", "")), fit=tuple(d.get("fit", ())))


def load_calibration(path) -> Calibration:
    return load_document(path, "calibration", calibration_from_json)


def save_calibration(cal: Calibration, path) -> None:
    write_json_atomic(path, cal.to_json())


@dataclass(frozen=True)
class RunSample:
    label: str
    schedule: Schedule
    costs: StageCosts           # measured standalone in the run (no realism terms)
    measured: float             # measured iteration seconds
    optimizer: float            # measured optimizer-step seconds
    shared: bool                # every stage on one device

    @property
    def compute_actions(self) -> int:
        return sum(1 for row in self.schedule.rows for a in row if a.kind in COMPUTE_KINDS)


def predict(sample: RunSample, cal: Calibration) -> float:
    """The run's iteration as the calibrated simulator predicts it."""
    costs = cal.apply(sample.costs)
    sched = on_one_device(sample.schedule, costs) if sample.shared else sample.schedule
    return iteration_time(sched, costs)


def fit(samples: list[RunSample], link_sharing: float = 0.0, source: str = "") -> Calibration:
    """Fit action_overhead and optimizer_s_per_byte on `samples` (link_sharing is
    assumed as given); the result's `fit` rows give every run's measured, ideal and
    calibrated prediction."""
    if not samples:
        raise ScheduleError("calibration fit needs at least one run")
    rates = [s.optimizer / sum(s.costs.weight_bytes) for s in samples if s.optimizer > 0 and sum(s.costs.weight_bytes)]
    opt = statistics.median(rates) if rates else 0.0
    base = Calibration(0.0, opt, link_sharing)
    residual = [(s.compute_actions, s.measured - predict(s, base)) for s in samples]
    overhead = max(sum(n * r for n, r in residual) / sum(n * n for n, _ in residual), 0.0)
    assumed = ("link_sharing",) + (() if rates else ("optimizer_s_per_byte",))
    cal = Calibration(overhead, opt, link_sharing, assumed, source)
    rows = []
    for s in samples:
        ideal = iteration_time(on_one_device(s.schedule, s.costs) if s.shared else s.schedule, s.costs)
        pred = predict(s, cal)
        rows.append({"run": s.label, "measured_s": s.measured, "ideal_s": ideal, "calibrated_s": pred,
                     "measured_over_calibrated": s.measured / pred, "compute_actions": s.compute_actions})
    return Calibration(overhead, opt, link_sharing, assumed, source, tuple(rows))


def sample_from_run(label: str, doc: dict) -> RunSample:
    """A RunSample from an `obscura train --json` result (obscura-train/1) with the
    run's standalone costs: the schedule is regenerated from the run's generator,
    adjusted stages and swap settings (and must hold the actions the measured
    timeline ran)."""
    if doc.get("format") != "obscura-train/1" or not doc.get("costs") or not doc.get("timeline"):
        raise ScheduleError(f"{label}: not an obscura-train/1 result with costs and a measured timeline")
    p, m, stages = doc["num_stages"], doc["num_microbatches"], doc["stages"]
    adjusted = [s for s, st in enumerate(stages) if st.get("adjusted")]
    last = max(adjusted) if adjusted else None
    lam = int(stages[last].get("swap_blocks", 0)) if last is not None else 0
    beta = float(stages[last].get("swap_fraction", 0.0)) if last is not None else 0.0
    kw = {"adjusted": tuple(adjusted)} if adjusted else {}
    if lam:
        kw.update(swap_blocks=lam, swap_fraction=beta)
    sched = generate(doc["schedule"], p, m, **kw)
    ran = [sorted(o["action"] for o in row["ops"]) for row in doc["timeline"]["stages"]]
    if ran != [sorted(str(a) for a in st.actions) for st in sched.stages]:
        raise ScheduleError(f"{label}: the regenerated {doc['schedule']!r} schedule differs from the run's actions")
    costs = StageCosts.from_json(doc["costs"])      # its host_bandwidth_out/_in ignored, as any reader does
    return RunSample(label, sched, costs, float(doc["iteration_time"]), float(doc.get("optimizer_time") or 0.0),
                     bool(doc.get("shared_devices")))
