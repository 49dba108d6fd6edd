"""Parallel-layout sweep (docs/layouts.md): enumerate micro-batch x PP x TP (x SP) x
recompute policy x attention layouts on N GPUs at a fixed global batch, drop those
that do not fit in memory, predict iteration time (measured or analytic per-layer
costs in the planner's profile format, TP collectives, the planner's StageCosts and
the project's 1F1B simulator, DP traffic) and rank by MFU.

    import models
    from planner.layouts import LayoutGrid, run_sweep
    result = run_sweep(models.get_config("llama2-13b"), 2048, LayoutGrid(gpus=64, global_batch=2048))
    result.fitting[0].layout.label, result.fitting[0].mfu
"""
from planner.layouts.hardware import Hardware
from planner.layouts.measured import MeasuredLayers, default_measured_path, layer_key, load_measured
from planner.layouts.memory import STATE_PRESETS, StageMemory, TrainingState
from planner.layouts.space import ATTENTIONS, POLICIES, Layout, LayoutGrid, enumerate_layouts
from planner.layouts.sweep import LayoutResult, SweepResult, run_sweep
from planner.layouts.unit_costs import UnitModel, analytic_units

__all__ = ["Hardware", "MeasuredLayers", "default_measured_path", "layer_key", "load_measured",
           "STATE_PRESETS", "StageMemory", "TrainingState", "ATTENTIONS", "POLICIES", "Layout",
           "LayoutGrid", "enumerate_layouts", "LayoutResult", "SweepResult", "run_sweep", "UnitModel",
           "analytic_units"]
