"""A parallel-block family (models.registry BLOCK_KINDS: embed, block, head): L+2
partition units, model-info, and a profile the planner plans on."""
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

import models
from models.errors import ModelConfigError

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
import parallel_block  # noqa: E402  registers parallel-tiny


@dataclass(frozen=True)
class FakeTiming:
    fwd: float
    bwd: float
    residual_bytes: int
    temp_bytes: int = 0


def test_units_are_embed_blocks_head():
    cfg = models.get_config("parallel-tiny")
    assert cfg.num_units == cfg.num_layers + 2 == 6
    assert models.unit_names(cfg) == ["embed", "block_0", "block_1", "block_2", "block_3", "head"]
    assert models.get_family("parallel").layer_kinds == ("block",)
    assert models.even_partition(cfg.num_units, 4) == [(0, 2), (2, 3), (3, 4), (4, 6)]
    with pytest.raises(ModelConfigError, match="parallel block"):
        models.register_family("half", units={"embed": object, "block": object, "mlp": object, "head": object},
                               ops={"embed": ["e"], "block": ["b"], "mlp": ["m"], "head": ["h"]})


def test_profile_and_plan_on_block_units():
    from planner.plan import plan_search
    from planner.profile import profile_from_json
    from obscura_jax.profiling.profiler import profile_model
    cfg = models.get_config("parallel-tiny")
    seen = []

    def time_unit(cfg_, unit_range, policy, device, params, x, targets, reps, split=False):
        seen.append(unit_range)
        return FakeTiming(0.001, 0.002, 0, temp_bytes=100)
    prof = profile_model(cfg, 16, 1, time_unit=time_unit, reps=1, ops=["pb_mlp_act"]).profile
    assert [k for k, _ in prof.units] == ["embed", "block", "head"] and prof.num_units == 6
    assert (1, 2) in seen and prof.layer_recompute_time is None     # a block is its own layer
    again = profile_from_json(prof.to_json())
    assert again.kinds == ("embed", "block", "block", "block", "block", "head")
    plan = plan_search(again, 2, 4, "1GiB").plan
    assert [tuple(st.units) for st in plan.stages][-1][1] == 6
