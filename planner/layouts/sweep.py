"""The layout sweep: enumerate, check memory, predict time, rank by MFU.

    MFU = tokens/s * flops_per_token / (gpus * peak)

Per layout the per-unit costs come from measured layer costs when the measurement
file has the (layer shape, seq, micro-batch, attention, policy) entry (or can
derive it), else from the analytic roofline (scaled to the file's measured points
of the same shape and seq when there are any); each row says which.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from models.config import ModelConfig
from models.errors import ObscuraError
from models.info import flops_per_token
from models.tensor_parallel import check_tensor_parallel
from planner.errors import PlanError
from planner.layouts.hardware import Hardware
from planner.layouts.measured import BENCH_REVISION, MeasuredLayers, calibrate, layer_key
from planner.layouts.memory import (StageMemory, TrainingState, sharded_weight_bytes, stage_kinds,
                                    stage_memory)
from planner.layouts.space import Layout, LayoutGrid, enumerate_layouts, explain_empty
from planner.layouts.timing import IterationTime, iteration_time, pipeline_costs
from planner.layouts.unit_costs import UnitModel, analytic_units, layout_profile, recompute_ops
from planner.profile import UNIT_KINDS

ANALYTIC, SCALED = "analytic", "scaled"   # besides "measured" and "derived" (planner.layouts.measured)


@dataclass(frozen=True)
class LayoutResult:
    layout: Layout
    source: str                         # where the layer costs came from
    memory: StageMemory                 # the stage with the largest total
    worst_stage: int
    fits: bool
    time: IterationTime | None = None   # None when the layout does not fit
    mfu: float | None = None
    tokens_per_second: float | None = None
    not_runnable: str | None = None     # why the model registry cannot shard it (None: runnable)

    @property
    def runnable(self) -> bool:
        """`obscura train --layout` can run it: the registry shards the model over its TP."""
        return self.not_runnable is None

    def to_json(self, rank: int | None = None) -> dict:
        t = self.time
        return {**self.layout.to_json(), "label": self.layout.label, "rank": rank, "fits": self.fits,
                "runnable": self.runnable, "not_runnable": self.not_runnable,
                "cost_source": self.source, "mfu": self.mfu,
                "tokens_per_second": self.tokens_per_second,
                "iteration_time": t.total if t else None,
                "pipeline_time": t.pipeline if t else None,
                "dp_exposed_time": t.dp_exposed if t else None,
                "optimizer_time": t.optimizer if t else None,
                "bubble_fraction": t.bubble_fraction if t else None,
                "memory_per_gpu": self.memory.total, "worst_stage": self.worst_stage,
                "weights_bytes": self.memory.weights,
                "activation_bytes": self.memory.activations,
                "transient_bytes": self.memory.transient,
                "inflight_microbatches": self.memory.inflight}


@dataclass(frozen=True)
class SweepResult:
    cfg: ModelConfig
    seq_len: int
    grid: LayoutGrid
    hardware: Hardware
    state: TrainingState
    results: tuple[LayoutResult, ...]   # fitting ones by MFU (best first), then the rest
    skipped: tuple[tuple[str, str], ...]
    measured_path: str | None = None
    measured_device: str | None = None
    flops_per_token: float = 0.0
    notes: tuple[str, ...] = field(default=())

    @property
    def fitting(self) -> tuple[LayoutResult, ...]:
        return tuple(r for r in self.results if r.fits)

    def to_json(self) -> dict:
        return {"format": "obscura-sweep/1", "model": self.cfg.name, "seq_len": self.seq_len,
                "gpus": self.grid.gpus, "global_batch": self.grid.global_batch,
                "flops_per_token": self.flops_per_token,
                "hardware": self.hardware.to_json(),
                "training_state": {"name": self.state.name, "zero1": self.state.zero1,
                                   "describe": self.state.describe()},
                "measured_layer_costs": self.measured_path, "measured_device": self.measured_device,
                "grid": {"micro_batches": list(self.grid.micro_batches), "pp": list(self.grid.pps),
                         "tp": list(self.grid.tps), "policies": list(self.grid.policies),
                         "attentions": list(self.grid.attentions),
                         "sequence_parallel": list(self.grid.sequence_parallel)},
                "num_layouts": len(self.results), "num_fitting": len(self.fitting),
                "skipped": [{"where": w, "reason": r} for w, r in self.skipped],
                "notes": list(self.notes),
                "layouts": [r.to_json(i if r.fits else None) for i, r in enumerate(self.results, 1)]}


def _rank_key(r: LayoutResult):
    """Best MFU first. Rows of equal MFU (to 9 significant digits: e.g. a small model
    whose time is all DP traffic, where every policy ties) go to the layout with less
    model parallelism and smaller micro-batches, then less recompute (seconds of it on
    stage 0), then less memory."""
    layout = r.layout
    mfu = float(f"{r.mfu or 0.0:.9g}")
    recompute = r.time.recompute if r.time is not None else 0.0
    return (-mfu, layout.tp * layout.pp, layout.micro_batch, recompute, r.memory.total)


class _Costs:
    """Per-unit costs, cached per (mbs, attention, policy, TP, SP).

    With a measurement file, points no rule reaches would rank with the analytic
    model's optimism against calibrated rows. They are scaled instead by the mean
    measured/analytic ratio of this shape and sequence length (labelled SCALED), so
    a table stays comparable; with no measured point at all they stay ANALYTIC."""

    def __init__(self, cfg: ModelConfig, seq_len: int, hw: Hardware, measured: MeasuredLayers | None,
                 layouts):
        self.cfg, self.seq_len, self.hw, self.measured = cfg, seq_len, hw, measured
        self._cache: dict = {}
        self._factors: dict = {}
        self.slowdowns: list[float] = []     # measured / analytic layer time, per point
        for key in sorted({(l.micro_batch, l.attention, l.policy) for l in layouts}):
            m = None if measured is None else measured.lookup(layer_key(cfg), seq_len, *key)
            if m is not None:
                tp1 = analytic_units(cfg, seq_len, *key, 1, False, hw)
                _, f = calibrate(tp1, tp1, m, recompute_ops(key[2], cfg.family))
                a_attn, a_mlp = tp1["attn"].profile(), tp1["mlp"].profile()
                a = a_attn.fwd_time + a_mlp.fwd_time, a_attn.bwd_time + a_mlp.bwd_time
                self._factors[key] = (m, tp1)
                self.slowdowns.append((f["fwd"] * a[0] + f["bwd"] * a[1]) / (a[0] + a[1]))
        self.scale = sum(self.slowdowns) / len(self.slowdowns) if self.slowdowns else None

    def __call__(self, layout: Layout) -> tuple[dict[str, UnitModel], str]:
        key = (layout.micro_batch, layout.attention, layout.policy, layout.tp, layout.sp)
        if key not in self._cache:
            self._cache[key] = self._compute(*key)
        return self._cache[key]

    def _compute(self, mbs, attention, policy, tp, sp) -> tuple[dict[str, UnitModel], str]:
        units = analytic_units(self.cfg, self.seq_len, mbs, attention, policy, tp, sp, self.hw)
        found = self._factors.get((mbs, attention, policy))
        if found is not None:
            m, tp1 = found
            return calibrate(units, tp1, m, recompute_ops(policy, self.cfg.family))[0], m.source
        if self.scale is None:
            return units, ANALYTIC
        k = self.scale
        return {kind: u.scaled(fwd=k, bwd=k, recompute=k) if kind in ("attn", "mlp") else u
                for kind, u in units.items()}, SCALED


def evaluate_layout(layout: Layout, cfg: ModelConfig, seq_len: int, units: dict[str, UnitModel],
                    source: str, state: TrainingState, hw: Hardware,
                    model_flops_per_token: float) -> LayoutResult:
    """Memory of every stage; if the worst fits, the simulated iteration and MFU."""
    stages = stage_kinds(cfg, layout.pp)
    weights = {k: sharded_weight_bytes([k], cfg, layout.tp, layout.dp, state) for k in UNIT_KINDS}
    label = f"{layout.label} {layout.policy} {layout.attention}"
    profile = layout_profile(cfg, seq_len, layout.micro_batch, units, weights, hw, label)
    recompute = recompute_ops(layout.policy, cfg.family)
    costs = pipeline_costs(profile, cfg, layout, recompute, hw)
    mem = stage_memory(costs, stages, {k: u.transient_bytes for k, u in units.items()},
                       layout.num_microbatches)
    worst = max(range(len(mem)), key=lambda s: mem[s].total)
    fits = mem[worst].total <= hw.usable_memory
    if not fits:
        return LayoutResult(layout, source, mem[worst], worst, False)
    t, _ = iteration_time(costs, stages, layout, cfg, state, hw)
    tokens = layout.num_microbatches * layout.micro_batch * layout.dp * seq_len
    tps = tokens / t.total
    mfu = tps * model_flops_per_token / (layout.gpus * hw.device.peak_flops)
    return LayoutResult(layout, source, mem[worst], worst, True, t, mfu, tps)


def registry_problem(cfg: ModelConfig, tp: int) -> str | None:
    """Why the model registry cannot shard `cfg` over `tp` (models.tensor_parallel,
    what `obscura train --tensor-parallel` checks), or None."""
    try:
        check_tensor_parallel(cfg, tp)
    except ObscuraError as e:
        return str(e)
    return None


def run_sweep(cfg: ModelConfig, seq_len: int, grid: LayoutGrid, hw: Hardware | None = None,
              state: TrainingState | None = None, measured: MeasuredLayers | None = None,
              progress=None) -> SweepResult:
    """Evaluate every layout of `grid` for model config `cfg` at `seq_len`.
    Raises PlanError (one line) when the grid admits no layout at all."""
    hw = hw or Hardware()
    state = state or TrainingState()
    if isinstance(seq_len, bool) or not isinstance(seq_len, int) or seq_len < 1:
        raise PlanError(f"seq len must be a positive integer, got {seq_len!r}")
    layouts, skipped = enumerate_layouts(grid, cfg, hw.gpus_per_node)
    if not layouts:
        raise PlanError(explain_empty(grid, skipped))
    fpt = float(flops_per_token(cfg, seq_len))
    notes = []
    if measured is not None and measured.stale:
        notes.append(f"ignored {measured.path}: written by a layer bench before revision "
                     f"{BENCH_REVISION} (its timings let XLA drop forward work, so recompute looked "
                     f"free); re-run scripts/layouts/sweep_layer_bench.py. Costs below are analytic")
        measured = None
    costs = _Costs(cfg, seq_len, hw, measured, layouts)
    results = []
    problems = {tp: registry_problem(cfg, tp) for tp in sorted({l.tp for l in layouts})}
    for i, layout in enumerate(layouts):
        units, source = costs(layout)
        results.append(replace(evaluate_layout(layout, cfg, seq_len, units, source, state, hw, fpt),
                               not_runnable=problems[layout.tp]))
        if progress is not None:
            progress(i + 1, len(layouts))
    fitting = sorted((r for r in results if r.fits), key=_rank_key)
    rest = sorted((r for r in results if not r.fits), key=lambda r: r.memory.total)
    scaled = sum(r.source == SCALED for r in results)
    if measured is not None and costs.scale is None:
        notes.append(f"the measured layer file {measured.path} has no entry for this layer shape "
                     f"at seq {seq_len}: all costs are analytic")
    elif scaled:
        lo, hi = min(costs.slowdowns), max(costs.slowdowns)
        notes.append(f"{scaled} of {len(results)} layouts have no measured or derived layer cost: "
                     f"their analytic times are scaled by {costs.scale:.2f}, the mean measured/"
                     f"analytic ratio of this file's points here ({lo:.2f}-{hi:.2f})")
    return SweepResult(cfg, seq_len, grid, hw, state, tuple(fitting + rest), tuple(skipped),
                       measured.path if measured else None, measured.device if measured else None,
                       fpt, tuple(notes))
