"""The memory check (obscura_jax.run.memory_check, obscura_jax.run.stage_bytes): the
allocator's limit, the per-device estimate from the one memory fold, the refusal
before compiling and after, --force, and the estimate against what the run itself
counts (its ledger, its states, its programs' memory analysis)."""
import pytest

import models
import schedules
from obscura_jax.errors import RunError
from obscura_jax.processes.process_group import SINGLE
from obscura_jax.run import memory_check, trainer
from obscura_jax.run.memory_check import (ALLOCATOR_SHARE, MemoryCheckError, RunMemory, allocator_limit,
                                          env_limit, estimate)
from obscura_jax.run.run_config import RunConfig
from obscura_jax.run.stage_bytes import StageBytes, traced_residual_bytes
from obscura_jax.runtime.executor import make_optimizer
from obscura_jax.runtime.pipeline import build_program
from obscura_jax.runtime.placement import place_schedule, place_stages
from obscura_jax.observe.summary import summarize
from obscura_jax.run.data import BatchShape

RUN = dict(model="llama2-tiny", stages=2, microbatches=3, micro_batch_size=2, seq_len=16, cost_reps=1, steps=2)
GiB = 2 ** 30


def place(p):
    return place_stages(p, "cpu", 2)


class FakeDevice:
    platform, id, local_hardware_id = "gpu", 0, 0

    def __init__(self, stats):
        self.stats = stats

    def memory_stats(self):
        return self.stats


def test_the_limit_is_declared_reported_or_what_xla_takes_of_the_device(monkeypatch):
    assert allocator_limit(FakeDevice({"bytes_limit": 5}), 7.0) == (7.0, "--device-memory")
    assert allocator_limit(FakeDevice({"bytes_limit": 5, "peak_bytes_in_use": 1}), None)[0] == 5.0
    monkeypatch.setattr(memory_check, "gpu_total_bytes", lambda d: 80 * GiB)
    assert allocator_limit(FakeDevice(None), None, environ={})[0] == 0.75 * 80 * GiB
    assert env_limit(80 * GiB, {"XLA_PYTHON_CLIENT_MEM_FRACTION": "0.5"})[0] == 40 * GiB
    limit, source = env_limit(80 * GiB, {"XLA_PYTHON_CLIENT_MEM_FRACTION": ".9",
                                         "XLA_PYTHON_CLIENT_PREALLOCATE": "false"})
    assert limit == 0.9 * 80 * GiB and "not preallocated" in source
    assert env_limit(80 * GiB, {"XLA_PYTHON_CLIENT_ALLOCATOR": "platform"})[0] == 80 * GiB
    with pytest.raises(RunError, match="XLA_PYTHON_CLIENT_MEM_FRACTION"):
        env_limit(80 * GiB, {"XLA_PYTHON_CLIENT_MEM_FRACTION": "most"})
    cpu = FakeDevice(None)
    cpu.platform = "cpu"
    assert allocator_limit(cpu, None) == (None, "unknown")


def _bytes(s, act, **kw):
    return StageBytes(s, params=100, grads=100, optimizer=200, act=act, act_recompute=act, boundary=10,
                      input=10, **kw)


def test_stages_sharing_a_device_sum_their_fold_peaks_and_the_check_names_the_largest_term():
    sched = schedules.generate("1f1b", 2, 4)
    order = schedules.issue_order(sched)
    rows = {0: _bytes(0, 1000.0, working=50.0, runtime=8), 1: _bytes(1, 500.0, working=70.0, measure=300.0)}
    apart = estimate(sched, order, rows, [10, 0], {0: ["gpu:0"], 1: ["gpu:1"]})
    shared, = estimate(sched, order, rows, [10, 0], {0: ["gpu:0"], 1: ["gpu:0"]},
                       limits={"gpu:0": (3000.0, "--device-memory")})
    act = dict(shared.terms)["activations"]
    assert act == sum(dict(e.terms)["activations"] for e in apart)
    assert act == 2 * 1000.0 + 10 + 1 * 500.0 + 10      # 1F1B: stage 0 holds 2 blocks, 1 holds one; inboxes
    terms = dict(shared.terms)
    assert terms["weights"] == 800 and terms["working"] == 70.0 and terms["runtime"] == 8
    assert terms["allocator"] == pytest.approx(ALLOCATOR_SHARE * (800 + act + 70 + 8))
    assert shared.phase == "steps" and not shared.fits and shared.stages == (0, 1)
    line = shared.refusal()
    assert line.startswith(f"device gpu:0 needs ~") and "stages 0-1: activations" in line
    assert "largest term) but its allocator holds" in line and "(--device-memory)" in line
    assert "--microbatches" in line and line.endswith("or give --force to try anyway")
    resumed, = estimate(sched, order, rows, [10, 0], {0: ["gpu:0"], 1: ["gpu:0"]}, resume=True)
    assert dict(resumed.to_json()["phases"])["restore"] == pytest.approx((1 + ALLOCATOR_SHARE) * (800 + 600))
    # what earlier runs of the process left on the device counts in every phase
    crowded, = estimate(sched, order, rows, [10, 0], {0: ["gpu:0"], 1: ["gpu:0"]}, resident={"gpu:0": 5000})
    assert crowded.total == pytest.approx(shared.total + (1 + ALLOCATOR_SHARE) * 5000)
    assert crowded.largest() == ("resident", 5000.0) and "arrays already on the device" in crowded.refusal()


def test_a_v_schedules_chunks_on_one_device_are_folded_together_as_the_simulator_folds_them():
    """ZB-V's two chunks on a device peak at different times: the device's activations
    are the peak of their joint fold, not the sum of each chunk's peak."""
    sched = schedules.generate("zb-v", 2, 4)
    order = schedules.issue_order(sched)
    rows = {s: _bytes(s, 1000.0) for s in range(4)}
    boundary = [10, 10, 10, 0]
    est = estimate(sched, order, rows, boundary, {s: [f"gpu:{sched.stage_to_device[s]}"] for s in range(4)})
    below = 0
    for e in est:
        mine = [s for s in range(4) if f"gpu:{sched.stage_to_device[s]}" == e.device]
        alone = [dict(estimate(sched, order, {s: rows[s]}, boundary, {s: [e.device]})[0].terms)["activations"]
                 for s in mine]
        joint = dict(e.terms)["activations"]
        assert len(mine) == 2 and max(alone) <= joint <= sum(alone)
        below += joint < sum(alone)
    assert below        # the summed chunk peaks over-count some device


def test_traced_residuals_are_the_compiled_programs():
    """The check's figures before compiling are the stage program's own (the same
    pullback leaves), for every unit kind and policy shape."""
    cfg = models.get_config("llama2-tiny")
    import jax
    import jax.numpy as jnp
    for rng, policy in (((0, 3), "none"), ((3, 7), "full"), ((1, 5), "layer"), ((7, 10), "cmb")):
        pol = models.resolve_policy(policy, cfg.family)
        stage = models.build_stage(cfg, rng, pol)
        targets = jax.ShapeDtypeStruct((2, 16), jnp.int32) if stage.is_last else None
        params = models.stage_params(models.abstract_params(cfg), rng, cfg)
        prog = build_program(cfg, rng, pol, jax.devices("cpu")[0], BatchShape(3, 2, 16))
        assert traced_residual_bytes(stage, params, stage.input_spec(2, 16), targets) == prog.residual_bytes


@pytest.fixture(scope="module")
def forced():
    """A zero-bubble run (split backward: W's block, I's outputs) over a declared
    limit it cannot hold, forced."""
    return trainer.train(RunConfig(schedule="zb-h1", device_memory="64KiB", force_memory=True, **RUN), place,
                         log=lambda s: None)


def test_forced_run_counts_what_the_run_itself_holds(forced):
    res = summarize(forced)
    mem = res["memory"]
    assert mem["forced"] and mem["checked"] and len(mem["devices"]) == 2
    for s, (st, dev, est) in enumerate(zip(res["stages"], mem["devices"], forced.memory.estimates)):
        assert dev["stages"] == [s] and dev["limit_bytes"] == 64 * 2 ** 10
        assert dev["limit_source"] == "--device-memory" and dev["compiled"]
        assert dev["measured_peak_bytes"] is None                       # CPU: no memory_stats
        assert dev["predicted_bytes"] >= st["accounted_peak_bytes"]     # never below the run's own count
        steps = dict(dict(est.phase_terms)["steps"])
        assert steps["weights"] == st["weight_bytes"]                    # the states the run placed
        assert steps["activations"] == st["peak_activation_bytes"]       # the fold is the run's ledger
        assert steps["working"] >= st["temp_bytes"]                      # scratch, and I's outputs beside it
    assert any(dict(dict(e.phase_terms)["steps"])["working"] > forced.stage_facts[e.stages[0]]["temp_bytes"]
               for e in forced.memory.estimates)                        # a split backward's I outputs


def test_the_api_refuses_before_compiling(monkeypatch):
    def no_compile(*a, **k):
        raise AssertionError("compiled before the check")
    monkeypatch.setattr(trainer, "build_pipeline", no_compile)
    with pytest.raises(MemoryCheckError) as err:
        trainer.train(RunConfig(schedule="1f1b", device_memory="64KiB", **RUN), place, log=lambda s: None)
    line = str(err.value)
    assert line.startswith("device cpu:") and "the largest term) but its allocator holds 64.0 KiB" in line
    assert "--force" in line


def test_a_limit_only_the_compiled_figures_exceed_is_refused_before_any_array_is_placed(monkeypatch):
    run = RunConfig(schedule="1f1b", **RUN)
    cfg = run.model_config()
    schedule, partition = run.resolve(cfg)
    placement = place_schedule(place, schedule, 1, 1)
    before = RunMemory(run, cfg, schedule, partition, placement, SINGLE, make_optimizer(),
                       schedules.issue_order(schedule))
    before.verify()
    traced = max(e.total for e in before.estimates)

    def no_arrays(*a, **k):
        raise AssertionError("placed arrays before the check")
    monkeypatch.setattr(trainer.Pipeline, "init_state", no_arrays)
    with pytest.raises(MemoryCheckError, match="XLA scratch and program outputs|activations|weights"):
        trainer.train(RunConfig(schedule="1f1b", device_memory=traced + 1, **RUN), place, log=lambda s: None)
