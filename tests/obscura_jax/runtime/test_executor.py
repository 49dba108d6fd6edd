"""The executor on a toy three-stage pipeline (fast to compile): every schedule
generator's order gives the plain model's loss and gradients; memory accounting
and swapping behave. (The measured timeline: test_events.py.)"""
import random
from types import SimpleNamespace

import jax
import numpy as np
import pytest

import schedules
from obscura_jax.runtime.executor import MemoryLedger, PipelineExecutor, make_optimizer
from obscura_jax.runtime.messages import message_routes
from obscura_jax.runtime.transport import Transport
from obscura_jax.runtime.worker import StageWorker, StepContext
from schedules.ir import Action, Kind, Schedule, StageSpec
from schedules.memory import StageMemory
from schedules.timeline import OpRecord, Timeline
from tests.budget import examples
from tests.obscura_jax import toy_stages as toy

M = 4
CASES = {
    "gpipe": dict(),
    "1f1b": dict(),
    "recomp-all": dict(name="recomp", adjusted="all"),
    "strawman-0": dict(name="strawman", adjusted=0),
    "obscura-swap": dict(name="obscura", adjusted=0, swap_blocks=1, swap_fraction=0.5),
    "zb-h1": dict(name="zb-h1"),
    "obscura-zb-h1-swap": dict(name="obscura-zb-h1", adjusted=0, swap_blocks=1, swap_fraction=0.5),
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
    """An executor for one of CASES on the toy programs."""
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
    if case.endswith("-swap"):
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


def _split_schedule(kind_i: Kind) -> Schedule:
    """Every stage: F0 F1, the input halves I0 I1 (or the older spelling B), then W0 W1."""
    return Schedule("split", 3, 2, tuple(StageSpec(tuple(
        [Action(s, Kind.F, 0), Action(s, Kind.F, 1), Action(s, kind_i, 0), Action(s, kind_i, 1),
         Action(s, Kind.W, 0), Action(s, Kind.W, 1)])) for s in range(3)))


@pytest.mark.parametrize("kind_i", [Kind.I, Kind.B], ids=["I", "B-before-W"])
def test_split_backward_keeps_what_w_reads_and_dy_until_w(progs, kind_i):
    """I and W run as their own programs (W on what I hands it): the grads are the
    plain model's, and the ledger holds both micro-batches' W blocks and dy after
    the two I's (a fused backward would have freed them)."""
    sched = _split_schedule(kind_i)
    ex = PipelineExecutor(sched, progs, make_optimizer("sgd", 0.1), schedules.issue_order(sched))
    states = ex.init_state(toy.params())
    tok, tgt = (a[:2] for a in batch())
    res = ex.run_actions(states, tok, tgt, track_memory=True)
    ref_grads = jax.grad(toy.full_loss)(toy.params(), tok.reshape(-1, toy.T), tgt.reshape(-1, toy.T))
    for st, ref in zip(states, ref_grads):
        for a, b in zip(jax.tree.leaves(st.grads), jax.tree.leaves(ref)):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-7)
    assert res.ledger.live == [0, 0, 0]
    assert progs[1].dy_bytes == progs[1].output_bytes > 0 and progs[2].dy_bytes == 0
    for s in range(3):
        held = progs[s].weight_grad_held_bytes
        # the embedding's gradient is a scatter-add of dy: I computes it, W holds nothing
        assert (held > 0) == (s > 0)
        assert res.ledger.peak[s] >= max(2 * progs[s].residual_bytes, 2 * (held + progs[s].dy_bytes))


@pytest.mark.parametrize("where", [(0, 0, 1), (0, 0, 0)])
def test_stages_sharing_a_device_share_its_worker(where):
    """One worker per device: its row is the issue order restricted to its stages
    (all of it when every stage shares one device, as on the one-GPU bench)."""
    devices = [jax.devices()[i] for i in where]
    ex = PipelineExecutor(schedules.generate("1f1b", 3, M), toy.programs(devices), make_optimizer("sgd", 0.1),
                          schedules.issue_order(schedules.generate("1f1b", 3, M)))
    assert sorted(ex.rows) == sorted({d.id for d in devices})
    for dev, row in ex.rows.items():
        assert row == [a for a in ex.order if devices[a.stage].id == dev]
    states = ex.init_state(toy.params())
    tok, tgt = batch()
    ex.run_actions(states, tok, tgt)
    ref_grads = jax.grad(toy.full_loss)(toy.params(), tok.reshape(-1, toy.T), tgt.reshape(-1, toy.T))
    for st, ref in zip(states, ref_grads):
        for a, b in zip(jax.tree.leaves(st.grads), jax.tree.leaves(ref)):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-7)


def test_a_stage_that_fails_stops_the_step_with_its_error(progs):
    ex = make(progs, "1f1b")
    states = ex.init_state(toy.params())
    tok, tgt = batch()
    states[1] = None          # stage 1's worker fails at its first action; the others wait on it
    with pytest.raises(AttributeError):
        ex.run_actions(states, tok, tgt)


class _Block:
    """A block as a worker holds it, sizes only (obscura_jax.runtime.residuals.Residuals'
    fields the worker and its ledger notes read)."""
    def __init__(self, device, host=0):
        self.device_bytes, self.host_bytes, self.host_resident_bytes = device, host, host
        self.host_slots, self.leaves = ((0,) if host else ()), (None,)


class _Program:
    """A stage program that computes nothing: F keeps `kept` bytes, I hands W a block
    of `held` bytes (schedules.memory.StageMemory's figures)."""
    def __init__(self, st, first, last):
        self.st, self.takes_tokens, self.returns_loss, self.device = st, first, last, None

    def forward(self, params, x, targets=None):
        return "y", _Block(self.st.kept)

    def backward(self, params, res, dy, grads):
        return grads, None if self.takes_tokens else "dx", None

    def input_grad(self, params, res, dy, grads):
        return grads, None if self.takes_tokens else "dx", _Block(self.st.held_for_weight_grad), None

    def weight_grad(self, params, held, dy, grads):
        return grads, None


class _Swap:
    """Moves the stage's share of a block to host and back (sizes only)."""
    def swap_out(self, res, fraction, device):
        moved = int(fraction * res.device_bytes)
        return _Block(res.device_bytes - moved, moved)

    def swap_in(self, res, device):
        return _Block(res.device_bytes + res.host_bytes)


class _LocalTransport(Transport):
    def send(self, msg, value):
        self.deliver(msg, value)


def _run_workers(sched, mem, order, boundary_bytes):
    """The real stage workers and transport issue `order` (one worker per stage, on
    size-only programs) into a MemoryLedger, settled in that order."""
    p = sched.num_stages
    transport = _LocalTransport([None] * p, boundary_bytes, shardings=[None] * p)
    ledger = MemoryLedger.zeros(p)
    transport.start_step(ledger)
    ctx = StepContext(programs=[_Program(mem[s], s == 0, s == p - 1) for s in range(p)],
                      states=[SimpleNamespace(params=None, grads=None) for _ in range(p)], transport=transport,
                      routes=message_routes(sched), tokens=["x"] * sched.num_microbatches, targets=["t"] * sched.num_microbatches,
                      loss_dy="dy", losses=[None] * sched.num_microbatches, swap=_Swap(),
                      swap_fraction=[st.swap_fraction for st in mem], swap_enabled=True, ledger=ledger,
                      split=sched.split_blocks)
    workers = [StageWorker([], ctx) for _ in range(p)]
    for a in order:
        workers[a.stage].issue(a)
    assert not transport.finish_step() and not any(w.residuals or w.pending_dy for w in workers)
    return ledger.settle({a: i for i, a in enumerate(order)})


@pytest.mark.parametrize("seed", range(examples(50)))
def test_the_ledger_settles_to_the_one_folds_peaks(seed):
    """The runtime's ledger, fed by the real workers and transport issuing a random
    schedule in its issue order, settles to the peaks the one memory fold
    (schedules.memory) gives the same order on the issue clock (action i runs from
    2i to 2i + 1)."""
    rng = random.Random(seed)
    name = rng.choice(["gpipe", "1f1b", "recomp", "strawman", "obscura", "zb-h1", "zb-h1-capped", "obscura-zb-h1"])
    p, m = rng.randint(2, 5), rng.randint(1, 9)
    kw = {}
    if name.startswith("obscura") and rng.random() < 0.6:
        kw = dict(adjusted=0, swap_blocks=1, swap_fraction=0.5)
    try:
        sched = schedules.generate(name, p, m, **kw)
    except schedules.ScheduleError:          # too few warm-up forwards to swap
        sched = schedules.generate(name, p, m)
    boundary = [rng.choice([0, 16, 3000]) for _ in range(p - 1)]      # a message's bytes, either way
    mem = [StageMemory(kept=rng.choice([8, 64, 1000]), swap_fraction=sched.stages[s].swap_fraction,
                       held_for_weight_grad=rng.choice([4, 80, 1200]), inbox_input=boundary[s - 1] if s else 0,
                       inbox_grad=boundary[s] if s < p - 1 else 0) for s in range(p)]
    order = schedules.issue_order(sched)
    ledger = _run_workers(sched, mem, order, boundary)
    clock = Timeline.from_ops(p, [OpRecord.of(a, 2 * i, 2 * i + 1) for i, a in enumerate(order)], memory=mem)
    assert ledger.live == [0] * p
    assert ledger.peak == [st.peak_held_bytes for st in clock.stages]
