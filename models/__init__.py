"""Flax NNX Llama-2 and GPT-3 decoders with named, recomputable ops.

Public API (what engine, planner and profiler code against):
  configs   ModelConfig, ModelConfigError, CONFIGS, get_config
  ops       LLAMA_OPS, GPT_OPS, ALL_OPS, POLICY_PRESETS, ops_for, unit_ops, preset_ops
  policies  RecomputePolicy, resolve_policy
  units     unit_names, unit_kind, even_partition
  params    init_params, abstract_params, count_params, stage_params
  stages    Stage, build_stage, model_loss, model_logits
  info      model_info, unit_residual_bytes, op_act_bytes   (models.info)
"""
from models.config import CONFIGS, ModelConfig, ModelConfigError, get_config
from models.ops import (ALL_OPS, GPT_OPS, LLAMA_OPS, POLICY_PRESETS, UNIT_KINDS, ops_for,
                        preset_ops, unit_ops)
from models.policy import RecomputePolicy, resolve_policy
from models.stage import Stage, build_stage, model_logits, model_loss, unit_apply_fn
from models.units import (abstract_params, count_params, even_partition, init_params,
                          stage_params, unit_kind, unit_names)

__all__ = [
    "CONFIGS", "ModelConfig", "ModelConfigError", "get_config",
    "ALL_OPS", "GPT_OPS", "LLAMA_OPS", "POLICY_PRESETS", "UNIT_KINDS", "ops_for", "preset_ops",
    "unit_ops", "RecomputePolicy", "resolve_policy",
    "Stage", "build_stage", "model_logits", "model_loss", "unit_apply_fn",
    "abstract_params", "count_params", "even_partition", "init_params", "stage_params",
    "unit_kind", "unit_names",
    "model_info", "unit_residual_bytes", "op_act_bytes",
]


def __getattr__(name):  # models.info traces JAX programs; load it on first use
    if name in ("model_info", "unit_residual_bytes", "op_act_bytes", "info"):
        import models.info as info
        return info if name == "info" else getattr(info, name)
    raise AttributeError(f"module 'models' has no attribute {name!r}")
