"""planner.recompute.memory_rows: a device's fold over its order as linear rows in its stages'
kept bytes gives the fold's own peak for every choice of kept bytes."""
import random
from dataclasses import replace

import pytest

from planner.recompute.memory_rows import device_rows
from schedules import StageCosts, generate
from schedules.memory import order_memory
from schedules.simulator import stage_memory


class _ByStage:
    def __init__(self, mem):
        self.mem = mem

    def __getitem__(self, s):
        return self.mem[s]


@pytest.mark.parametrize("name,kw", [
    ("1f1b", {}), ("zb-h1", {}), ("zb-v", {}), ("interleaved", {"virtual_stages": 2}),
    ("1f1b", {"adjusted": 1, "swap_blocks": 2, "swap_fraction": 0.5}),
    ("zb-h1", {"adjusted": 1, "swap_blocks": 1, "swap_fraction": 1.0}),
])
def test_rows_give_the_folds_peak_for_any_kept_bytes(name, kw):
    sched = generate(name, 4, 8, **kw)
    n = sched.num_stages
    rng = random.Random(7)
    none = [rng.uniform(5, 10) for _ in range(n)]
    costs = StageCosts(fwd=(1.0,) * n, bwd=(2.0,) * n, act_bytes=tuple(none),
                       weight_grad_held=tuple(rng.uniform(1, 4) for _ in range(n)))
    for d in range(sched.num_devices):
        rows = device_rows(sched, costs, d)
        for _ in range(5):
            kept = {s: rng.uniform(0.5, none[s]) for s in rows.stages}
            # the same stage memory the simulator folds, at these kept bytes
            real = stage_memory(replace(sched, stages=tuple(
                replace(spec, recompute=("mlp_act",)) for spec in sched.stages)),
                replace(costs, act_bytes_recompute=tuple(kept.get(s, none[s]) for s in range(n))))
            want = order_memory(sched.rows[d], _ByStage(real)).peak_activation_bytes
            assert rows.peak([kept[s] for s in rows.stages]) == pytest.approx(want)
