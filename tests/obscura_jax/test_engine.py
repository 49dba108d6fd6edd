"""obscura_jax.engine: per-stage policies and the partition a pipeline runs."""
import pytest

import models
import schedules
from obscura_jax.engine import stage_policies, stage_ranges
from obscura_jax.errors import RunError

CFG = models.get_config("llama2-tiny")      # 10 units


def test_stage_ranges_counts_stages_and_tiles_the_model():
    assert stage_ranges(CFG, [[0, 4], [4, 10]], 2) == ((0, 4), (4, 10))
    with pytest.raises(RunError, match="partition has 3 stages, the schedule 2"):
        stage_ranges(CFG, [(0, 2), (2, 4), (4, 10)], 2)
    with pytest.raises(RunError, match="does not fit llama2-tiny: partition ends at unit 8"):
        stage_ranges(CFG, [(0, 4), (4, 8)], 2)
    with pytest.raises(RunError, match="stage 1 starts at unit 5"):
        stage_ranges(CFG, [(0, 4), (5, 10)], 2)


def test_adjusted_stages_run_their_recompute_set_the_rest_the_base_policy():
    sched = schedules.generate("recomp", 3, 4, adjusted=0, recompute=("cmb",))
    pols = stage_policies(CFG, sched, "none")
    assert [p.name for p in pols] == ["cmb", "none", "none"]
