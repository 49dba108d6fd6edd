"""The one memory fold (schedules.memory) counts every figure the schedules package
reports, on random schedules of every generator with swaps and random costs: the
cap search's blocks held (generators/caps.py), the search's (makespan, held peaks)
(simulator.held_peaks), and the count over an order (order_memory, what the swap
pass and the recompute IP read), which is the timed fold's whenever swaps are
instant."""
import math

import pytest
from hypothesis import given, settings, strategies as st

from schedules import generate, simulate
from schedules.generators.caps import held_peaks as rows_held
from schedules.memory import order_memory
from schedules.simulator import held_peaks, stage_memory
from tests.budget import examples
from tests.schedules.test_properties import SETTINGS, instances


@settings(max_examples=examples(50), **SETTINGS)
@given(instances())
def test_every_schedules_memory_figure_is_the_folds(inst):
    name, p, m, kw = inst
    sched = generate(name, p, m, **kw)
    costs = kw["costs"]
    tl = simulate(sched, costs)
    assert rows_held(sched.rows) == tuple(st.peak_inflight_microbatches for st in tl.stages)
    assert held_peaks(sched, costs) == (tl.makespan, tuple(st.peak_held_bytes for st in tl.stages))
    instant = costs.with_(host_bandwidth=math.inf)
    timed = simulate(sched, instant)
    mem = stage_memory(sched, instant)
    for d, row in enumerate(sched.rows):
        counted = order_memory(row, mem)
        assert counted.peak_activation_bytes == timed.stages[d].peak_activation_bytes
        assert counted.peak_inflight_microbatches == timed.stages[d].peak_inflight_microbatches


@settings(max_examples=examples(30), **SETTINGS)
@given(st.floats(0.0, 4.0), st.floats(0.0, 4.0), st.floats(0.0, 4.0), st.one_of(st.none(), st.floats(0.0, 6.0)))
def test_block_levels_are_the_fold_over_one_blocks_f_i_w(kept, remat, freed, held):
    """What the zero-bubble heuristic charges (memory.block_levels) is the fold's
    own count: the peak over F, I, W of one block, and nothing left after its W."""
    from schedules.ir import Action, Kind
    from schedules.memory import StageMemory, Uniform, block_levels
    stage = StageMemory(kept=kept, remat=remat, freed_by_input_grad=freed, held_for_weight_grad=held)
    levels = block_levels(stage)
    row = [Action(0, Kind.F, 0), Action(0, Kind.I, 0), Action(0, Kind.W, 0)]
    assert max(v for step in levels for v in step) == pytest.approx(order_memory(row, Uniform(stage)).peak_activation_bytes)
    assert levels[-1][-1] == pytest.approx(0.0)
