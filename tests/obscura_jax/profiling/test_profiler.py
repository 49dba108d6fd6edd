"""obscura_jax.profiling.profiler with an injected unit timer (the planner never imports the
engine), and end to end on CPU: `obscura profile` (llama2-tiny, real compiled
programs; the command passes obscura_jax.observe.measure.time_unit_program) -> `obscura
plan` with a limit that forces adjusted stages -> a plan the engine can run (its
schedule validates, its stages are the engine's unit ranges)."""
from dataclasses import dataclass

import jax
import pytest

import models
from obscura_jax.cli.main import main
from obscura_jax.run.data import BatchShape
from obscura_jax.runtime.pipeline import build_program
from obscura_jax.observe.measure import unit_weight_grad_bytes
from obscura_jax.runtime.weight_grad import WeightGrad
from planner.baselines import evaluate_baselines, minimum_memory
from planner.identify import stage_peak_1f1b
from planner.errors import ProfileError
from planner.plan import load_plan, plan_to_schedule
from planner.profile import load_profile
from tests.planner.profile_times import fixed_times_file
from obscura_jax.profiling.profiler import profile_model
from planner.recompute.residuals import exact_unit_kept, marginal_op_bytes
from planner.search import Setting
from schedules import validate

P, M = 4, 8


@dataclass(frozen=True)
class FakeTiming:
    fwd: float
    bwd: float
    residual_bytes: int
    temp_bytes: int = 0


def test_the_injected_timer_prices_every_unit():
    """profile_model takes every time from `time_unit`: each unit kind's range with
    the all-saved policy, then each recompute set that changes the residuals (here
    mlp_act recomputed), then min(LAYER_SPAN, layers) layers under `none` and `layer`
    (llama2-tiny: all 4, units [1, 9)), priced per layer."""
    cfg = models.get_config("llama2-tiny")
    seen = []

    def time_unit(cfg_, unit_range, policy, device, params, x, targets, reps, split=False):
        seen.append((unit_range, policy.name, reps, targets is not None))
        return FakeTiming(0.001 * (len(seen)), 0.002 * len(seen), 0, temp_bytes=64)

    run = profile_model(cfg, 16, 1, time_unit=time_unit, reps=1, ops=["mlp_act"])
    head = (cfg.num_units - 1, cfg.num_units)
    assert [(r, pol) for r, pol, *_ in seen] == [((0, 1), "none"), ((1, 2), "none"), ((2, 3), "none"),
                                                  ((2, 3), "mlp_act"), (head, "none"), ((1, 9), "none"),
                                                  ((1, 9), "layer")]
    assert all(reps == 1 for _, _, reps, _ in seen) and seen[4][3] and not seen[5][3]
    assert [u.fwd_time for _, u in run.profile.units] == [0.001, 0.002, 0.003, 0.005]
    assert run.profile.unit("mlp").bwd_time == 0.006
    assert run.profile.unit("mlp").op("mlp_act").fwd_time == pytest.approx(0.008 - 0.006)
    assert run.profile.layer_recompute_time == pytest.approx((0.014 - 0.012) / 4)
    assert all(u.scratch_bytes == 64 for _, u in run.profile.units)         # the timer's temp bytes, recorded
    assert any("engine residual 0 B" in n for n in run.notes)                 # checked against the trace
    with pytest.raises(ProfileError, match="unknown op"):
        profile_model(cfg, 16, 1, time_unit=time_unit, ops=["nope"])


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    path = tmp_path_factory.mktemp("e2e") / "tiny.json"
    assert main(["profile", "--model", "llama2-tiny", "--seq-len", "64", "--micro-batch", "2",
                 "--reps", "1", "--json", str(path)]) == 0   # bytes are what is checked; any times do
    return path, load_profile(path)


@pytest.fixture(scope="module")
def fixed(measured, tmp_path_factory):
    """The measured profile with fixed times (tests/planner/profile_times.py): the
    plans below are made from its bytes, whatever the load did to its times."""
    return fixed_times_file(measured[0], tmp_path_factory.mktemp("fixed") / "tiny.json")


@pytest.mark.slow
def test_profile_bytes_are_the_engines(measured):
    _, prof = measured
    cfg = models.get_config("llama2-tiny")
    import models.info as info
    assert prof.device == "cpu" and prof.model == "llama2-tiny" and prof.seq_len == 64
    for kind, unit in prof.units:
        # input + every op = what jax.vjp keeps with nothing recomputed; input = with everything
        assert unit.kept_bytes(()) == info.unit_residual_bytes(cfg, kind, "none", 64, 2)
        assert unit.input_bytes == info.unit_residual_bytes(cfg, kind, "full", 64, 2)
        assert unit.fwd_time > 0 and unit.bwd_time > 0 and unit.weight_bytes > 0
        assert all(o.fwd_time >= 0 and o.act_bytes >= 0 for _, o in unit.ops)
        # the split backward's I and W, each timed as the engine's own program; W holds
        # what it reads (the engine's cut of that program), the output gradient included
        assert unit.input_grad_time > 0 and unit.weight_grad_time > 0
        r = dict(zip(models.unit_names(cfg), range(cfg.num_units)))[{"attn": "attn_0", "mlp": "mlp_0"}.get(kind, kind)]
        prog = build_program(cfg, (r, r + 1), "none", jax.devices("cpu")[0], BatchShape(1, 2, 64))
        assert unit.weight_grad_bytes == unit_weight_grad_bytes(prog)
        assert unit.weight_grad_made_bytes == unit_weight_grad_bytes(prog, made=True) <= unit.weight_grad_bytes
        assert unit.weight_grad_beside_bytes == unit_weight_grad_bytes(prog, beside=True) \
            <= unit.weight_grad_made_bytes
        # the embedding's gradient is a scatter-add of dy that I computes: W holds nothing
        assert (unit.weight_grad_bytes > 0) == (kind != "embed")
        # the W that re-derives its inputs: its own program, timed and counted the same way
        again = build_program(cfg, (r, r + 1), "none", jax.devices("cpu")[0], BatchShape(1, 2, 64), True,
                              WeightGrad("rederive"))
        assert unit.weight_grad_rederive_time > 0
        assert unit.weight_grad_rederive_bytes == unit_weight_grad_bytes(again) <= unit.weight_grad_bytes
        if kind in ("attn", "mlp"):       # the unit's input instead of its norm output and gated product
            assert unit.weight_grad_rederive_bytes < unit.weight_grad_bytes
    # params + grads + optax adamw's state (mu, nu and a step count)
    import optax
    params = models.init_params(cfg, 0, (1, 2))
    nbytes = lambda tree: sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(tree))  # noqa: E731
    assert prof.unit("attn").weight_bytes == 2 * nbytes(params) + nbytes(optax.adamw(1e-3).init(params))
    assert prof.unit("attn").weight_bytes >= 4 * nbytes(params)
    # the traced check recognises the profile; recomputing q alone frees nothing
    kept = exact_unit_kept(prof)
    assert kept is not None
    assert kept("attn", frozenset({"q"})) == kept("attn", frozenset())
    assert marginal_op_bytes(prof)["attn"][1]["q"] == 0


def limit_only_adjusted_stages_fit(prof) -> int:
    """A limit between the memory floor (adjusted stages recomputing whole units and
    swapping) and the least any baseline needs: only Obscura's own search
    (`--no-families`) with adjusted stages fits (on the profile's fixed times:
    measured ones of 0 let a baseline reach the floor on a busy machine)."""
    even = tuple(models.even_partition(prof.num_units, P))
    free = Setting(prof, M, float("inf"))
    need_1f1b = max(stage_peak_1f1b(prof, r, s, P, M, frozenset()) for s, r in enumerate(even))
    least_baseline = min(max(ev.peaks) for ev in evaluate_baselines(free, even).values())
    floor = minimum_memory(free, even)[0]
    cap = min(need_1f1b, least_baseline)
    assert floor < cap
    return int(floor + 0.5 * (cap - floor))


def without_scratch(prof):
    """The profile as written before units recorded their XLA scratch."""
    from dataclasses import replace
    return replace(prof, units=tuple((k, replace(u, scratch_bytes=None)) for k, u in prof.units))


@pytest.mark.slow
def test_profile_then_plan_with_adjusted_stages(fixed, tmp_path, capsys):
    from planner.profile import save_profile
    _, prof = fixed
    prof = without_scratch(prof)      # identification alone (the scratch is a fixed term per stage)
    path = tmp_path / "profile.json"
    save_profile(prof, path)
    limit = limit_only_adjusted_stages_fit(prof)
    plan_path = tmp_path / "plan.json"
    assert main(["plan", "--profile", str(path), "--stages", str(P), "--microbatches", str(M),
                 "--memory-limit", str(limit), "--no-families", "--json", str(plan_path)]) == 0
    out = capsys.readouterr().out
    assert "adjusted stages 0.." in out
    plan = load_plan(plan_path)
    assert plan.adjusted_stages and all(st.predicted_peak_bytes <= limit for st in plan.stages)
    sched = plan_to_schedule(plan)
    validate(sched)
    assert [tuple(st.units) for st in plan.stages][-1][1] == models.get_config("llama2-tiny").num_units
    for st in plan.stages:  # every stage's recompute set is a policy the models package accepts
        models.resolve_policy(list(st.recompute), "llama")


@pytest.mark.slow
def test_profile_plan_train_stays_under_the_limit(fixed, tmp_path, capsys):
    """The last leg: `obscura train --plan` runs the plan; its per-stage peak in the
    CPU accounting (weights + live activations + XLA scratch) stays under the limit
    with no --reserve: the profile records each unit's XLA scratch and the plan
    counts it, so its prediction is never below what the engine counts."""
    import json
    from planner.costs import stage_scratch
    path, prof = fixed
    assert all(u.scratch_bytes > 0 for _, u in prof.units)      # recorded per unit program
    # the limit a plan held at before only with `--reserve <the stages' scratch>`
    reserve = max(stage_scratch(prof, r) for r in models.even_partition(prof.num_units, P))
    limit = int(limit_only_adjusted_stages_fit(without_scratch(prof)) + reserve)
    plan_path, run_path = tmp_path / "plan.json", tmp_path / "run.json"
    assert main(["plan", "--profile", str(path), "--stages", str(P), "--microbatches", str(M),
                 "--memory-limit", str(limit), "--no-families", "--json", str(plan_path)]) == 0
    assert main(["train", "--plan", str(plan_path), "--model", "llama2-tiny", "--steps", "2",
                 "--devices", f"cpu:{P}", "--micro-batch-size", "2", "--seq-len", "64", "--no-progress",
                 "--json", str(run_path)]) == 0
    assert "never under-predicted" in capsys.readouterr().out
    for st in json.loads(run_path.read_text())["stages"]:
        assert st["accounted_peak_bytes"] <= limit
        assert st["planned_vs_measured_bytes"] >= 0
