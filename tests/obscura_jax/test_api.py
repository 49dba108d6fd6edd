"""The Python API: train(RunConfig) with a Schedule object, a name or a path; the
TrainResult; make_pipeline deriving order, partition and batch shape; the summary's
one meaning of `adjusted`."""
import numpy as np
import pytest

import obscura_jax
import schedules
from obscura_jax import RunConfig
from obscura_jax.run.data import BatchShape, open_data
from obscura_jax.errors import UsageError
from schedules import Action, Kind, Schedule, StageSpec

SHAPE = dict(model="llama2-tiny", micro_batch_size=2, seq_len=16, steps=2, cost_reps=1)


def _hand_made() -> Schedule:
    """GPipe on 2 stages, 2 micro-batches, written out by hand; stage 0 recomputes."""
    F, B = Kind.F, Kind.B
    rows = [[Action(0, F, 0), Action(0, F, 1), Action(0, B, 0), Action(0, B, 1)],
            [Action(1, F, 0), Action(1, F, 1), Action(1, B, 0), Action(1, B, 1)]]
    return Schedule("hand", 2, 2, (StageSpec(tuple(rows[0]), ("full",)), StageSpec(tuple(rows[1]))))


def test_runconfig_takes_a_schedule_object_name_or_path(tmp_path):
    sched = _hand_made()
    res = obscura_jax.train(RunConfig(schedule=sched, measure_costs=False, **SHAPE), devices="cpu:2")
    assert isinstance(res, obscura_jax.TrainResult) and len(res.losses) == 2
    assert res.summary["schedule"] == "hand" and res.summary["adjusted_stages"] == [0]
    assert [st["recomputes"] for st in res.summary["stages"]] == [True, False]
    assert "[0, 5)" in res.report() and res.timeline is not None and res.simulated is None
    check = res.check()
    assert check["equal"] and check["max_loss_rel_diff"] <= 1e-5
    schedules.formats.io.save_schedule(sched, tmp_path / "hand.json")
    from_file = obscura_jax.train(RunConfig(schedule=tmp_path / "hand.json", measure_costs=False, **SHAPE),
                                  devices="cpu:2")
    np.testing.assert_allclose(from_file.losses, res.losses, rtol=1e-6)
    with pytest.raises(UsageError, match="--stages 4 disagrees with the 2 of schedule 'hand'"):
        obscura_jax.train(RunConfig(schedule=sched, stages=4, **SHAPE))
    with pytest.raises(UsageError, match="must be a generator name, a schedule JSON path or a Schedule"):
        RunConfig(schedule=3)
    with pytest.raises(UsageError, match="--weight-grad must be one of hold, rederive, got 'keep'"):
        RunConfig(weight_grad="keep")
    with pytest.raises(UsageError, match="--head-weight-grad must be one of auto, defer, at-once, got 'now'"):
        RunConfig(head_weight_grad="now")


def test_make_pipeline_derives_order_partition_and_shape():
    sched = schedules.generate("1f1b", 2, 4)
    pipe = obscura_jax.make_pipeline("llama2-tiny", sched, micro_batch_size=2, seq_len=16, devices="cpu:2")
    assert pipe.partition == ((0, 5), (5, 10)) and pipe.shape == BatchShape(4, 2, 16)
    assert [p.weight_grad_mode for p in pipe.programs] == ["hold", "hold"]
    assert pipe.executor.order == list(schedules.issue_order(sched))
    states = pipe.init_state(0)
    tokens, targets = open_data("synthetic", model_vocab=256, seed=0).microbatches(0, pipe.shape)
    result = pipe.executor.run_actions(states, tokens, targets)
    assert np.all(np.isfinite(np.asarray(result.losses))) and len(np.asarray(result.losses)) == 4
