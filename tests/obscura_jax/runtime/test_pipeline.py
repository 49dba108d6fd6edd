"""obscura_jax.runtime.pipeline: per-stage policies and the partition a pipeline runs."""
import pytest

import models
import schedules
from obscura_jax.runtime.pipeline import stage_policies, stage_ranges
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


def test_stages_init_on_their_devices_like_the_whole_model_with_one_init_program_per_kind():
    """Pipeline.init_state: each stage holds exactly its slice of the whole model's
    params, on its own device; the units are made on one device (a jitted init
    per device is traced and lowered again: obscura_jax.runtime.pipeline)."""
    import dataclasses

    import jax
    import numpy as np

    from models.units import _jitted_unit_init, unit_kind, unit_names
    from obscura_jax.api import make_pipeline

    cfg = dataclasses.replace(CFG, name="llama2-tiny-init-once")     # its own jitted inits
    pipe = make_pipeline(cfg, "1f1b", micro_batch_size=1, seq_len=8, devices="cpu:4")
    states = pipe.init_state(3)
    # one program per unit kind for the 4 stages
    for kind in {unit_kind(n) for n in unit_names(cfg)}:
        assert _jitted_unit_init(cfg, kind)._cache_size() == 1, kind
    whole = models.init_params(cfg, 3)
    for s, (start, end) in enumerate(pipe.partition):
        params = states[s].params
        assert sorted(params) == sorted(unit_names(cfg)[start:end])
        assert {d for a in jax.tree.leaves(params) for d in a.devices()} == set(pipe.placement.mesh(s).devices)
        for name in params:
            for a, b in zip(jax.tree.leaves(params[name]), jax.tree.leaves(whole[name]), strict=True):
                np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
