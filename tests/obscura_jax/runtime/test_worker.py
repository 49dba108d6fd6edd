"""The stage worker's dispatch window (obscura_jax.runtime.worker.MAX_AHEAD): a worker waits
for its oldest action's outputs before it issues one more than MAX_AHEAD ahead,
and the window changes nothing the pipeline computes."""
import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import schedules
from obscura_jax.runtime import worker
from obscura_jax.runtime.executor import PipelineExecutor, make_optimizer
from tests.obscura_jax import toy_stages as toy

M = 4


@pytest.mark.parametrize("name, ahead", [("1f1b", 2), ("zb-h1", 3)])
def test_a_worker_issues_at_most_max_ahead_actions_past_its_oldest_unfinished(monkeypatch, name, ahead):
    events: list = []       # (thread, "issue" | "wait", ids of the action's outputs), in order per thread
    issue, wait = worker.StageWorker.issue, worker._wait_ready

    def logged_issue(self, action):
        produced = issue(self, action)
        events.append((threading.get_ident(), "issue", tuple(map(id, produced))))
        return produced

    def logged_wait(arrays):
        events.append((threading.get_ident(), "wait", tuple(map(id, arrays))))
        wait(arrays)
        assert all(a.is_deleted() or a.is_ready() for a in arrays)

    monkeypatch.setattr(worker, "MAX_AHEAD", ahead)
    monkeypatch.setattr(worker.StageWorker, "issue", logged_issue)
    monkeypatch.setattr(worker, "_wait_ready", logged_wait)
    sched = schedules.generate(name, 3, M)
    ex = PipelineExecutor(sched, toy.programs(jax.devices()[:3]), make_optimizer("sgd", 0.1),
                          schedules.issue_order(sched))
    states = ex.init_state(toy.params())
    rng = np.random.default_rng(0)
    tok, tgt = (rng.integers(0, toy.V, (M, toy.B, toy.T)).astype(np.int32) for _ in range(2))
    res = ex.run_actions(states, tok, tgt)
    ref_loss, _ = jax.value_and_grad(toy.full_loss)(toy.params(), tok.reshape(-1, toy.T), tgt.reshape(-1, toy.T))
    np.testing.assert_allclose(float(np.mean(np.asarray(res.losses))), float(ref_loss), rtol=1e-6)

    threads = {t for t, _, _ in events}
    assert len(threads) == 3
    for t in threads:
        mine = [(kind, ids) for tt, kind, ids in events if tt == t]
        issued = [ids for kind, ids in mine if kind == "issue"]
        assert len(issued) > ahead
        # the i-th dispatch (from 0) comes after the waits for dispatches 0 .. i - ahead, in order
        waits = n = 0
        for kind, ids in mine:
            if kind == "wait":
                assert ids == issued[waits]
                waits += 1
            else:
                assert n - waits < ahead
                n += 1
        assert waits == len(issued) - ahead


def test_waiting_for_an_output_that_a_later_program_took_is_no_error():
    step = jax.jit(lambda x: x * 2, donate_argnums=0)
    kept, given = jnp.arange(4.0) + 1, jnp.arange(4.0) + 2
    step(given)
    assert given.is_deleted()
    worker._wait_ready((kept, given))
    assert kept.is_ready()
