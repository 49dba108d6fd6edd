"""The one memory accounting (schedules.memory): blocks live until W, what I frees and
re-materialises, the inbox, several stages on a device."""
import pytest

from schedules import Action, Kind, OpRecord, Schedule, StageCosts, StageSpec, Timeline, generate, simulate
from schedules.memory import StageMemory


def _ops(*spec):
    """(stage, 'F0', start, end) ... -> OpRecords."""
    out = []
    for s, text, a, b in spec:
        act = Action.parse(text, s)
        out.append(OpRecord.of(act, a, b))
    return out


def test_split_backward_holds_the_block_until_w():
    ops = _ops((0, "F0", 0, 1), (0, "F1", 1, 2), (0, "I0", 2, 3), (0, "F2", 3, 4), (0, "W0", 4, 5),
               (0, "I1", 5, 6), (0, "W1", 6, 7), (0, "I2", 7, 8), (0, "W2", 8, 9))
    tl = Timeline.from_ops(1, ops, memory=[StageMemory(kept=4.0)])
    assert tl.stages[0].peak_inflight_microbatches == 3          # F2 starts before W0 frees block 0
    assert tl.stages[0].peak_activation_bytes == 12.0
    assert dict(tl.memory[0])[5] == 8.0 and tl.memory[0][-1] == (9, 0.0)


def test_input_grad_frees_part_and_recompute_rematerialises_until_w():
    ops = _ops((0, "F0", 0, 1), (0, "I0", 1, 3), (0, "W0", 5, 6))
    tl = Timeline.from_ops(1, ops, memory=[StageMemory(kept=2.0, remat=6.0, freed_by_input_grad=3.0)])
    mem = dict(tl.memory[0])
    assert mem[0] == 2.0 and mem[1] == 8.0          # I re-runs the forward: 2 kept + 6 rematerialised
    assert mem[3] == 5.0 and mem[6] == 0.0          # I frees 3 at its end, W the rest
    assert tl.stages[0].peak_activation_bytes == 8.0


def test_simulator_prices_remat_and_frees_from_stage_costs():
    rows = "F0 I0 W0".split()
    s = Schedule("t", 1, 1, (StageSpec(tuple(Action.parse(a, 0) for a in rows), ("full",)),))
    costs = StageCosts(fwd=(1.0,), bwd=(2.0,), recompute=(0.5,), act_bytes=(10.0,), act_bytes_recompute=(1.0,),
                       freed_by_input_grad=(4.0,))
    tl = simulate(s, costs)
    assert tl.op(0, "I0").duration == pytest.approx(1.5) and tl.op(0, "I0").recompute == 0.5
    mem = dict(tl.memory[0])
    assert mem[0] == 1.0 and mem[1] == 10.0 and mem[2.5] == 6.0     # kept, + remat 9, - 4 freed by I
    assert tl.stages[0].peak_activation_bytes == 10.0


def test_inbox_counts_what_arrived_but_is_not_consumed():
    # stage 1's F0 starts at 3, stage 0's F0 at 0: the activation waits in stage 1's inbox 0..3
    ops = _ops((0, "F0", 0, 1), (1, "F0", 3, 4), (1, "B0", 4, 5), (0, "B0", 8, 9))
    mem = [StageMemory(kept=1.0, inbox_grad=5.0), StageMemory(kept=1.0, inbox_input=7.0)]
    tl = Timeline.from_ops(2, ops, memory=mem)
    assert tl.stages[1].peak_held_bytes == 7.0                     # the input, gone before F0 allocates
    assert tl.stages[0].peak_held_bytes == 1.0 + 5.0               # block 0 plus the waiting gradient
    assert tl.stages[0].peak_activation_bytes == 1.0


def test_a_split_backward_keeps_the_received_gradient_until_w():
    """Stage 0's I0 consumes the gradient at 5, but W0 (7..8) needs it again: the
    engine keeps dy until W, so does the accounting (with a fused B it would go at 5)."""
    ops = _ops((0, "F0", 0, 1), (1, "F0", 1, 2), (1, "I0", 2, 3), (1, "W0", 3, 4), (0, "I0", 5, 6),
               (0, "F1", 6, 7), (0, "W0", 7, 8), (0, "I1", 8, 9), (0, "W1", 9, 10))
    mem = [StageMemory(kept=1.0, inbox_grad=5.0), StageMemory(kept=1.0)]
    tl = Timeline.from_ops(2, ops, memory=mem)
    assert tl.stages[0].peak_held_bytes == 2.0 + 5.0              # blocks 0 and 1 at 6..7, dy of 0 kept


def test_a_device_holds_the_blocks_of_all_its_stages():
    s = generate("zb-v", 2, 4)
    costs = StageCosts.uniform(4, 1, 2, 0, act_bytes=(1.0, 10.0, 100.0, 1000.0))
    tl = simulate(s, costs)
    for d in range(2):
        mine = [o for o in tl.ops if s.stage_to_device[o.stage] == d]
        kept = {o.stage: costs.act_bytes[o.stage] for o in mine}
        level = peak = 0.0
        for t in sorted({o.start for o in mine} | {o.end for o in mine}):
            level = sum(kept[o.stage] for o in mine if o.kind == Kind.F and o.start <= t
                        and not any(w.stage == o.stage and w.microbatch == o.microbatch and w.kind == Kind.W
                                    and w.end <= t for w in mine))
            peak = max(peak, level)
        assert tl.stages[d].peak_activation_bytes == pytest.approx(peak)


def test_a_measured_weight_grad_block_replaces_the_residuals_at_the_end_of_i():
    """weight_grad_held (what W reads, measured) wins over freed_by_input_grad: the
    block becomes exactly that at I's end, larger or smaller than the residuals."""
    from schedules import Action, Kind, Schedule, StageSpec, simulate
    from schedules.costs import StageCosts
    row = (Action(0, Kind.F, 0), Action(0, Kind.F, 1), Action(0, Kind.I, 0), Action(0, Kind.I, 1),
           Action(0, Kind.W, 0), Action(0, Kind.W, 1))
    sched = Schedule("split", 1, 2, (StageSpec(row),))
    for held, peak in ((30.0, 200.0), (150.0, 300.0)):
        costs = StageCosts.uniform(1, 1, 2, 0, act_bytes=100.0, input_grad=(1.0,), weight_grad=(1.0,),
                                   freed_by_input_grad=(90.0,), weight_grad_held=(held,))
        stats = simulate(sched, costs).stages[0]
        assert stats.peak_activation_bytes == peak
