"""The training loop (obscura_jax.run.trainer) called directly: steps and losses, the
measured and simulated timelines, the summary's per-stage accounting, and the
in-run swap overlap. (`obscura train` end to end: tests/obscura_jax/cli/commands/.)"""
import numpy as np
import pytest

from models.units import tree_bytes
from obscura_jax.errors import RunError
from obscura_jax.runtime.placement import place_stages
from obscura_jax.run.run_config import RunConfig
from obscura_jax.observe.summary import summarize
from obscura_jax.run.agreement import identity_of
from obscura_jax.run.trainer import train

RUN = dict(model="llama2-tiny", stages=2, microbatches=2, micro_batch_size=2, seq_len=16, cost_reps=1,
           learning_rate=1e-2)


@pytest.fixture(scope="module")
def outcome():
    return train(RunConfig(steps=3, schedule="1f1b", **RUN), lambda p: place_stages(p, "cpu", 2), log=lambda s: None)


def test_steps_losses_and_timelines(outcome):
    assert [s.step for s in outcome.steps] == [1, 2, 3]
    assert all(np.isfinite(s.loss) and s.seconds > 0 for s in outcome.steps)
    # every timed step (after the warm-up step) is recorded, so each costs the same
    assert [s.recorded for s in outcome.steps] == [False, True, True]
    assert outcome.timeline is not None and outcome.simulated is not None
    n_ops = sum(len(spec.actions) for spec in outcome.pipeline.schedule.stages)
    assert len(outcome.timeline.ops) == len(outcome.simulated.ops) == n_ops
    assert outcome.update_seconds is not None and outcome.update_seconds > 0


def test_summary_accounts_for_each_stage(outcome):
    res = summarize(outcome)
    assert res["format"] == "obscura-train/1" and res["steps"] == [1, 2, 3]
    assert res["iteration_time"] > 0 and res["simulated_iteration_time"] > res["simulated_makespan"]
    for s, row in enumerate(res["stages"]):
        st = outcome.states[s]
        assert row["weight_bytes"] == tree_bytes(st.params) + tree_bytes(st.grads) + tree_bytes(st.opt_state)
        assert row["accounted_peak_bytes"] == (row["weight_bytes"] + row["peak_activation_bytes"]
                                               + row["temp_bytes"])
        assert row["peak_source"] == "accounting"          # CPU devices have no memory_stats


def test_identity_names_what_a_resumed_run_must_share(outcome):
    ident = identity_of(outcome.config, outcome.pipeline.partition, outcome.pipeline.schedule)
    assert ident["model"] == "llama2-tiny" and ident["microbatches"] == 2
    assert ident["units"] == [list(r) for r in outcome.pipeline.partition]


def test_a_finished_checkpoint_has_nothing_left_to_do(outcome, tmp_path):
    from obscura_jax.checkpoints.pipeline import PipelineCheckpointer
    ident = identity_of(outcome.config, outcome.pipeline.partition, outcome.pipeline.schedule)
    ck = PipelineCheckpointer(tmp_path, resume=False)
    ck.save(3, [(st.params, st.opt_state) for st in outcome.states], ident)
    ck.close()
    run = RunConfig(steps=3, schedule="1f1b", checkpoint_dir=str(tmp_path), resume=True, **RUN)
    with pytest.raises(RunError, match="nothing to do for --steps 3"):
        train(run, lambda p: place_stages(p, "cpu", 2), log=lambda s: None)


def test_measured_zb_h1_timeline_shows_w_as_its_own_spans(tmp_path):
    """zb-h1 on 4 emulated devices: every I and W of the recorded step is its own span
    on its device's compute lane (after its I, not overlapping the device's other
    compute), and the Gantt chart and Perfetto trace draw them."""
    import json

    from obscura_jax.api import TrainResult
    from schedules.ir import Kind
    from schedules.formats.trace import write_trace
    run = RunConfig(steps=2, schedule="zb-h1", **{**RUN, "stages": 4, "microbatches": 4})
    out = train(run, lambda p: place_stages(p, "cpu", 4), log=lambda s: None)
    ops = {(o.stage, o.kind, o.microbatch): o for o in out.timeline.ops}
    ws = [o for o in out.timeline.ops if o.kind is Kind.W]
    assert len(ws) == 16 and not any(o.kind is Kind.B for o in out.timeline.ops)
    for w in ws:   # a W can look instant where the waiter saw it ready together with its I
        assert w.end >= w.start >= ops[(w.stage, Kind.I, w.microbatch)].end
    assert sum(w.end - w.start for w in ws) > 0
    for d in range(4):
        mine = sorted(out.timeline.device_ops(d), key=lambda o: o.start)
        assert all(x.end <= y.start + 1e-12 for x, y in zip(mine, mine[1:]))
    assert out.measured.costs.weight_grad and all(w > 0 for w in out.measured.costs.weight_grad)
    write_trace(out.timeline, tmp_path / "trace.json")
    names = [e["name"] for e in json.loads((tmp_path / "trace.json").read_text())["traceEvents"] if e["ph"] == "X"]
    assert sum(n.startswith("W") for n in names) == 16
    res = summarize(out)
    assert TrainResult(res, out).gantt(tmp_path / "zb.png") and (tmp_path / "zb.png").stat().st_size > 0
