"""Flax NNX Llama-2 and GPT-3 decoders with named, recomputable ops.

Public API (what engine, planner and profiler code against):
  configs   ModelConfig, ModelConfigError, CONFIGS, get_config, register_config
  errors    ObscuraError (the project's bad-input error), ModelConfigError
  families  register_family, get_family, family_names, load_model_module, UNIT_KINDS,
            ops_for, unit_ops, op_unit_kind, preset_names, preset_ops, all_ops,
            format_units (a unit range as tables print it: "[a, b)")
            (models.registry); the built-in llama and gpt: LLAMA_OPS, GPT_OPS (models.ops)
  policies  RecomputePolicy, resolve_policy, offload_names
  units     unit_names, unit_kind, even_partition, tree_bytes
  params    init_params, abstract_params, count_params, stage_params
  stages    Stage, build_stage, model_loss, model_logits
  info      model_info, unit_residual_bytes, op_act_bytes   (models.info)

Names load on first use, so `import models` (and `import models.errors` from the
JAX-free schedules package) imports no JAX until a name that needs it is used.
"""
from __future__ import annotations

import importlib
import sys

import models.ops  # noqa: F401  the built-in families (Llama-2, GPT-3) register on import (no JAX)

_EXPORTS = {
    "CONFIGS": "models.config", "ModelConfig": "models.config", "get_config": "models.config",
    "register_config": "models.config",
    "ModelConfigError": "models.errors", "ObscuraError": "models.errors",
    "GPT_OPS": "models.ops", "LLAMA_OPS": "models.ops",
    "ModelFamily": "models.registry", "register_family": "models.registry",
    "get_family": "models.registry", "family_names": "models.registry",
    "load_model_module": "models.registry", "UNIT_KINDS": "models.registry",
    "ops_for": "models.registry", "unit_ops": "models.registry", "op_unit_kind": "models.registry",
    "preset_names": "models.registry", "format_units": "models.registry", "preset_ops": "models.registry", "all_ops": "models.registry",
    "RecomputePolicy": "models.policy", "resolve_policy": "models.policy", "offload_names": "models.policy",
    "Stage": "models.stage", "build_stage": "models.stage", "model_logits": "models.stage",
    "model_loss": "models.stage", "unit_apply_fn": "models.stage",
    "abstract_params": "models.units", "count_params": "models.units",
    "even_partition": "models.units", "init_params": "models.units", "stage_params": "models.units",
    "tree_bytes": "models.units", "unit_kind": "models.units", "unit_names": "models.units",
    "model_info": "models.info", "unit_residual_bytes": "models.info", "op_act_bytes": "models.info",
}

__all__ = sorted(_EXPORTS)


def lazy_attributes(package: str, exports: dict[str, str]):
    """A module-level __getattr__ that imports `exports[name]` (a module path) the
    first time `name` is used: packages stay cheap to import. The value is then kept
    in the package's namespace, so later uses are plain attribute reads (the planner
    reads models.unit_ops a million times in one search)."""
    def __getattr__(name):
        if name in exports:
            value = getattr(importlib.import_module(exports[name]), name)
            setattr(sys.modules[package], name, value)
            return value
        raise AttributeError(f"module {package!r} has no attribute {name!r}")
    return __getattr__


__getattr__ = lazy_attributes("models", _EXPORTS)
