"""The measured timeline (obscura_jax.observe.events): waiter threads note when each issued
action is ready, and `infer_ops` turns those times into per-action starts that
respect an in-order device and every dependency."""
import sys
import threading
import time

import jax
import pytest
from hypothesis import given, settings, strategies as st

from obscura_jax.observe.events import (ActionEvent, EventRecorder, MeasuredOp, MeasuredTransfer, TransferEvent,
                                        infer_ops, infer_transfers)
from schedules.ir import Action, Kind
from tests.budget import examples
from tests.obscura_jax import toy_stages as toy
from tests.obscura_jax.runtime.test_executor import batch, make


@pytest.fixture(scope="module")
def progs():
    return toy.programs(jax.devices()[:3])


def test_measured_timeline_respects_dependencies(progs):
    ex = make(progs, "obscura-swap")
    states = ex.init_state(toy.params())
    tok, tgt = batch()
    ex.run_iteration(states, tok, tgt)  # warm
    with EventRecorder(ex.devices) as rec:
        ex.run_iteration(states, tok, tgt, recorder=rec)
        jax.block_until_ready([st.params for st in states])
        events = rec.close()
    ops = {o.action: o for o in infer_ops(events, 3, ex.order)}
    assert len(ops) == len(ex.order)
    for a, o in ops.items():
        assert 0 <= o.start <= o.end
        if a.kind is Kind.F and a.stage > 0:
            assert o.start >= ops[Action(a.stage - 1, Kind.F, a.microbatch)].end
        if a.kind is Kind.B:
            assert o.start >= ops[Action(a.stage, Kind.F, a.microbatch)].end
            if a.stage < 2:
                assert o.start >= ops[Action(a.stage + 1, Kind.B, a.microbatch)].end
        if a.kind is Kind.SI:
            assert o.start >= ops[Action(a.stage, Kind.SO, a.microbatch)].end
    # Compute ops of one stage do not overlap (one in-order device each).
    for s in range(3):
        mine = sorted((o for a, o in ops.items() if a.stage == s and a.kind in (Kind.F, Kind.B)),
                      key=lambda o: o.start)
        assert all(x.end <= y.start + 1e-12 for x, y in zip(mine, mine[1:]))


def test_infer_ops_uses_the_latest_constraint():
    f0, f1 = Action(0, Kind.F, 0), Action(1, Kind.F, 0)
    b1, b0 = Action(1, Kind.B, 0), Action(0, Kind.B, 0)
    order = [f0, f1, b1, b0]
    ev = [ActionEvent(f0, 0, 10.0, 12.0), ActionEvent(f1, 1, 10.1, 15.0),
          ActionEvent(b1, 1, 10.2, 19.0), ActionEvent(b0, 0, 10.3, 30.0)]
    ops = {o.action: o for o in infer_ops(ev, 2, order)}
    assert (ops[f0].start, ops[f0].end) == (0.0, 2.0)
    assert (ops[f1].start, ops[f1].end) == (2.0, 5.0)     # waits for F0 of stage 0
    assert (ops[b1].start, ops[b1].end) == (5.0, 9.0)     # waits for its own F
    assert (ops[b0].start, ops[b0].end) == (9.0, 20.0)    # waits for B of stage 1


def test_no_op_or_transfer_ends_after_the_latest_end():
    """A waiter thread that runs late (a busy machine) sees an output ready after the
    step's main thread saw every gradient ready: the inferred ends stop at that bound,
    and ops that waited on a late one start no later for it."""
    f0, f1 = Action(0, Kind.F, 0), Action(1, Kind.F, 0)
    b1, b0 = Action(1, Kind.B, 0), Action(0, Kind.B, 0)
    order = [f0, f1, b1, b0]
    ev = [ActionEvent(f0, 0, 10.0, 12.0), ActionEvent(f1, 1, 10.1, 15.0),
          ActionEvent(b1, 1, 10.2, 29.0), ActionEvent(b0, 0, 10.3, 31.0)]   # both seen late
    ops = {o.action: o for o in infer_ops(ev, 2, order, origin=10.0, latest_end=25.0)}
    assert (ops[f0].end, ops[f1].end) == (2.0, 5.0)       # seen in time: unchanged
    assert (ops[b1].start, ops[b1].end) == (5.0, 15.0)
    assert (ops[b0].start, ops[b0].end) == (15.0, 15.0)   # waits for B of stage 1, ends by the bound
    assert max(o.end for o in ops.values()) == 15.0
    late = TransferEvent("0F0->1F0", 0, 1, 1, 11.0, 27.0)
    (moved,) = infer_transfers([late], list(ops.values()), 10.0, latest_end=25.0)
    assert (moved.start, moved.end) == (2.0, 15.0)
    (unbounded,) = infer_transfers([late], list(ops.values()), 10.0)
    assert unbounded.end == 17.0


def test_swapped_blocks_wait_for_their_copies():
    """SO after its F, SI after its SO, and the B of a swapped block after its SI;
    copies run in their own lanes, so an SO may overlap the stage's compute."""
    f, so, si, b = (Action(0, k, 0) for k in (Kind.F, Kind.SO, Kind.SI, Kind.B))
    f1 = Action(0, Kind.F, 1)
    order = [f, so, f1, si, b]
    ev = [ActionEvent(f, 0, 0.0, 1.0), ActionEvent(so, 0, 0.1, 3.0), ActionEvent(f1, 0, 0.2, 2.0),
          ActionEvent(si, 0, 0.3, 4.0), ActionEvent(b, 0, 0.4, 6.0)]
    ops = {o.action: o for o in infer_ops(ev, 1, order)}
    assert ops[so].start == 1.0 and ops[f1].start == 1.0      # SO and the next F overlap
    assert ops[si].start == 3.0 and ops[b].start == 4.0


def test_lost_events_are_an_error():
    f0 = Action(0, Kind.F, 0)
    with pytest.raises(RuntimeError, match="lost 1 events"):
        infer_ops([ActionEvent(f0, 0, 0.0, 1.0)], 1, [f0, Action(0, Kind.B, 0)])


def test_recorder_threads_end_and_the_switch_interval_is_restored():
    before, threads = sys.getswitchinterval(), threading.active_count()
    a = Action(0, Kind.F, 0)
    with EventRecorder(jax.devices()[:1]) as rec:
        assert sys.getswitchinterval() < before
        rec.issued(a, (jax.numpy.ones(3),), 0.0)
        events = rec.close()
    assert [e.action for e in events] == [a] and events[0].ready >= events[0].dispatched
    assert sys.getswitchinterval() == before and threading.active_count() == threads


def test_transfers_are_timed_on_their_consumers_lane_after_their_producer(progs):
    """The transport's deliveries, recorded: one per cross-stage message, each after
    its producer's end and after the previous copy on its consumer's lane."""
    ex = make(progs, "1f1b")
    states = ex.init_state(toy.params())
    tok, tgt = batch()
    ex.run_iteration(states, tok, tgt)  # warm
    with EventRecorder(ex.devices) as rec:
        ex.transport.recorder = rec
        t0 = time.perf_counter()
        ex.run_iteration(states, tok, tgt, recorder=rec)
        jax.block_until_ready([st.params for st in states])
        events = rec.close()
        ex.transport.recorder = None
    ops = infer_ops(events, 3, ex.order, origin=t0)
    moved = infer_transfers(rec.transfers(), ops, t0)
    assert len(moved) == sum(len(v) for v in ex.routes.outgoing.values()) > 0
    end = {o.action.long: o.end for o in ops}
    lane: dict = {}
    for t in moved:
        assert t.start >= end[t.message.split("->")[0]] and t.end >= t.start >= lane.get(t.dst, 0.0)
        lane[t.dst] = t.end
    assert min(o.start for o in ops) >= 0      # the origin is the step's start, before its first dispatch


# --- the copy lanes are the list scheduler's ----------------------------------------

def _walked_transfers(transfers, ops, origin, latest_end=None):
    """The hand walk infer_transfers was before its copy lanes became the list
    scheduler's (schedules.scheduling.list_schedule.lane_run): the reference it must match."""
    end = {op.action.long: op.end for op in ops}
    lane_end, out = {}, []
    for t in sorted(transfers, key=lambda t: t.delivered):
        producer = t.message.split("->")[0]
        start = max(t.delivered - origin, end.get(producer, 0.0), lane_end.get(t.dst, 0.0))
        finish = max((t.ready if latest_end is None or t.ready <= latest_end else latest_end) - origin, start)
        lane_end[t.dst] = finish
        out.append(MeasuredTransfer(t.message, t.src, t.dst, start, finish))
    return out


@st.composite
def measured_copies(draw):
    """Ops of a few stages and copies between them: deliveries and ready times in
    any order (ties included), some producers not measured, ends past a bound."""
    times = st.sampled_from([0.0, 0.5, 1.0, 2.5, 4.0, 7.25, 11.0, 13.5])
    ops = []
    for s in range(3):
        for x in range(3):
            if draw(st.booleans()):
                t0 = draw(times)
                ops.append(MeasuredOp(Action(s, Kind.F, x), t0 - 2.0, t0 + draw(times)))
    copies = []
    for _ in range(draw(st.integers(0, 12))):
        s, x = draw(st.integers(0, 2)), draw(st.integers(0, 2))
        delivered = 10.0 + draw(times)
        copies.append(TransferEvent(f"{s}F{x}->{s + 1}F{x}", s, s + 1, s + 1, delivered,
                                    delivered + draw(times) - draw(st.sampled_from([0.0, 3.0]))))
    return copies, ops, draw(st.sampled_from([8.0, 10.0, 12.5])), draw(st.sampled_from([None, 15.0, 30.0]))


@settings(max_examples=examples(60), deadline=None, derandomize=True, database=None)
@given(measured_copies())
def test_copy_lanes_match_the_walk_they_replaced(case):
    assert infer_transfers(*case) == _walked_transfers(*case)
