"""The executor on a toy three-stage pipeline (fast to compile): every schedule
generator's order gives the plain model's loss and gradients; memory accounting,
swapping and the measured timeline behave."""
import jax
import numpy as np
import pytest

import schedules
from obscura_jax.events import EventRecorder, infer_ops
from obscura_jax.executor import PipelineExecutor, make_optimizer
from schedules.ir import Action, Kind, Schedule, StageSpec
from tests.obscura_jax import toy_stages as toy

M = 4
CASES = {
    "gpipe": dict(),
    "1f1b": dict(),
    "recomp-all": dict(name="recomp", adjusted="all"),
    "strawman-0": dict(name="strawman", adjusted=0),
    "obscura-swap": dict(name="obscura", adjusted=0, swap_blocks=1, swap_fraction=0.5),
}


@pytest.fixture(scope="module")
def progs():
    return toy.programs(jax.devices()[:3])


def batch(seed=0):
    rng = np.random.default_rng(seed)
    tok = rng.integers(0, toy.V, (M, toy.B, toy.T)).astype(np.int32)
    tgt = rng.integers(0, toy.V, (M, toy.B, toy.T)).astype(np.int32)
    return tok, tgt


def make(progs, case):
    kw = dict(CASES[case])
    name = kw.pop("name", case)
    sched = schedules.generate(name, 3, M, **kw)
    return PipelineExecutor(sched, progs, make_optimizer("sgd", 0.1), schedules.issue_order(sched))


@pytest.mark.parametrize("case", list(CASES))
def test_schedule_gives_plain_model_grads(progs, case):
    ex = make(progs, case)
    states = ex.init_state(toy.params())
    tok, tgt = batch()
    res = ex.run_actions(states, tok, tgt, track_memory=True)
    ref_loss, ref_grads = jax.value_and_grad(toy.full_loss)(
        toy.params(), tok.reshape(-1, toy.T), tgt.reshape(-1, toy.T))
    np.testing.assert_allclose(float(np.mean(np.asarray(res.losses))), float(ref_loss), rtol=1e-6)
    for st, ref in zip(states, ref_grads):
        for a, b in zip(jax.tree.leaves(st.grads), jax.tree.leaves(ref)):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-7)
    # Every residual and message was consumed: live bytes return to zero.
    assert res.ledger.live == [0, 0, 0]
    if case == "obscura-swap":
        assert ex.swap.counters.bytes_out == ex.swap.counters.bytes_in > 0


def test_memory_ledger_follows_the_schedule(progs):
    tok, tgt = batch()
    peaks = {}
    for case in ("gpipe", "1f1b"):
        ex = make(progs, case)
        peaks[case] = ex.run_actions(ex.init_state(toy.params()), tok, tgt, track_memory=True).ledger.peak
    r0 = progs[0].residual_bytes
    assert peaks["gpipe"][0] >= M * r0           # GPipe keeps every micro-batch
    assert 3 * r0 <= peaks["1f1b"][0] < peaks["gpipe"][0]   # 1F1B at most p in flight


def test_update_applies_one_optimizer_step(progs):
    ex = make(progs, "1f1b")
    states = ex.init_state(toy.params())
    tok, tgt = batch()
    ex.run_iteration(states, tok, tgt)
    grads = jax.grad(toy.full_loss)(toy.params(), tok.reshape(-1, toy.T), tgt.reshape(-1, toy.T))
    for st, p0, g in zip(states, toy.params(), grads):
        for a, b, c in zip(jax.tree.leaves(st.params), jax.tree.leaves(p0), jax.tree.leaves(g)):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b) - 0.1 * np.asarray(c), rtol=1e-5, atol=1e-7)
        assert all(float(np.abs(np.asarray(x)).max()) == 0 for x in jax.tree.leaves(st.grads))


def test_weight_grad_actions_are_rejected(progs):
    rows = []
    for s in range(3):
        acts = [Action(s, Kind.F, 0), Action(s, Kind.B, 0), Action(s, Kind.W, 0)]
        rows.append(StageSpec(tuple(acts)))
    sched = Schedule("zb", 3, 1, tuple(rows))
    with pytest.raises(ValueError, match="no W actions"):
        PipelineExecutor(sched, progs, make_optimizer("sgd", 0.1), schedules.issue_order(sched))


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
    from obscura_jax.events import ActionEvent
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
