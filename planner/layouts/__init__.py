"""Parallel-layout sweep (spec/layouts.md): enumerate micro-batch x PP x TP (x SP) x
recompute policy x attention layouts on N GPUs at a fixed global batch, drop those
that do not fit in memory, predict iteration time (measured or analytic per-layer
costs, TP collectives, the project's 1F1B simulator, DP traffic) and rank by MFU.

    from planner.layouts import LayoutGrid, run_sweep, model_config
    result = run_sweep(model_config("llama2-13b"), 2048, LayoutGrid(gpus=64, global_batch=2048))
    result.fitting[0].layout.label, result.fitting[0].mfu
"""
from planner.layouts.hardware import GiB, Hardware, parse_bytes
from planner.layouts.measured import (MeasuredLayers, default_measured_path, load_measured)
from planner.layouts.memory import STATE_PRESETS, StageMemory, TrainingState
from planner.layouts.model_shape import ModelShape, model_config
from planner.layouts.space import ATTENTIONS, POLICIES, Layout, LayoutGrid, enumerate_layouts
from planner.layouts.sweep import LayoutResult, SweepResult, run_sweep
from planner.layouts.unit_costs import UnitCost, analytic_unit_costs

__all__ = ["GiB", "Hardware", "parse_bytes", "MeasuredLayers", "default_measured_path",
           "load_measured", "STATE_PRESETS", "StageMemory", "TrainingState", "ModelShape",
           "model_config", "ATTENTIONS", "POLICIES", "Layout", "LayoutGrid", "enumerate_layouts",
           "LayoutResult", "SweepResult", "run_sweep", "UnitCost", "analytic_unit_costs"]
