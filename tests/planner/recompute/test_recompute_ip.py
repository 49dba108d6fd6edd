"""The CP-SAT op choice against a brute force over every op subset (same model)."""
import random

import pytest

from planner.costs import stage_views
from planner.profile import FULL, OpProfile, Profile, UnitProfile
from planner.recompute.recompute_ip import RecomputeProblem, StageProblem, score_closed_form, solve
from tests.planner.recompute_oracle import brute_force
from planner.search import Setting, stage_problem

KB = 1024


def few_op_profile(rng: random.Random) -> Profile:
    """A handful of ops per kind, random costs (distinct, so optima are unique)."""
    def unit(fwd, ops):
        return UnitProfile(fwd, 2 * fwd, rng.uniform(50, 200) * KB, rng.uniform(2, 8) * KB,
                           {n: OpProfile(rng.uniform(0.01, 0.4) * fwd, rng.uniform(1, 40) * KB) for n in ops})
    units = {"embed": unit(0.1, ["embed"]), "attn": unit(1.0, ["attn_norm", "q", "attn_core"]),
             "mlp": unit(2.0, ["mlp_norm", "mlp_act", "mlp_mul"]), "head": unit(0.5, ["final_norm", "logits"])}
    return Profile("llama-few-ops", "synthetic", 2, 64, 1, rng.uniform(5, 80) * KB, 1e12, 0.0, units)


def problem(prof, k, limit, lam_k, beta, resident):
    part = ((0, 2), (2, 4), (4, 6))
    setting = Setting(prof, 8, limit)
    stages = tuple(stage_problem(setting, part, s, resident[s] - (beta * (lam_k + k - s) if lam_k else 0),
                                 (lam_k + k - s) if lam_k else 0, 0.0) for s in range(k + 1))
    views = stage_views(prof, part)
    c_non = max(v.fwd + v.bwd for v in views[k + 1:])
    return RecomputeProblem(stages, 3, 8, beta if lam_k else 0.0, prof.host_bandwidth, c_non)


def _fraction_limit(prof, frac, resident):
    """A limit between whole-unit recompute (frac 0) and no recompute (frac 1) for stage 0."""
    part = ((0, 2), (2, 4), (4, 6))
    v = stage_views(prof, part)[0]
    low = v.weight_bytes + resident * v.input_bytes
    high = v.weight_bytes + resident * (v.input_bytes + sum(b for _, b in v.op_bytes))
    return low + frac * (high - low) + 60 * KB


CASES = [(seed, frac, k, lam, beta) for seed in range(6) for frac in (0.2, 0.45, 0.7, 1.1)
         for k, lam, beta in ((0, 0, 0.0), (1, 0, 0.0), (1, 1, 1.0), (0, 2, 0.5))]


@pytest.mark.parametrize("seed, frac, k, lam, beta", CASES)
def test_cpsat_choice_equals_brute_force(seed, frac, k, lam, beta):
    rng = random.Random(seed)
    prof = few_op_profile(rng)
    resident = (5, 4, 3)
    limit = _fraction_limit(prof, frac, resident[0])
    pr = problem(prof, k, limit, lam, beta, resident)
    got, want = solve(pr), brute_force(pr)
    assert (got is None) == (want is None)
    if want is None:
        return
    assert got.iteration_time == pytest.approx(want.iteration_time, rel=1e-6)
    assert sum(c.recompute_time for c in got.stages) == pytest.approx(
        sum(c.recompute_time for c in want.stages), rel=1e-6, abs=1e-9)
    assert got.sets == want.sets
    ok, *_ = score_closed_form(pr, got.sets)
    assert ok  # the integer rounding never accepts what the float model rejects


def test_tighter_limits_recompute_more():
    rng = random.Random(7)
    prof = few_op_profile(rng)
    times = []
    for frac in (1.1, 0.8, 0.5, 0.2, 0.0):
        sol = solve(problem(prof, 0, _fraction_limit(prof, frac, 4), 0, 0.0, (4, 3, 2)))
        assert sol is not None
        times.append(sum(c.recompute_time for c in sol.stages))
        assert all(c.peak_bytes <= _fraction_limit(prof, frac, 4) for c in sol.stages[:1])
    assert times == sorted(times) and times[0] == 0 and times[-1] > 0


def test_infeasible_below_whole_unit_recompute():
    rng = random.Random(3)
    prof = few_op_profile(rng)
    pr = problem(prof, 0, _fraction_limit(prof, 0.0, 5) - 200 * KB, 0, 0.0, (5, 4, 3))
    assert solve(pr) is None and brute_force(pr) is None


def test_full_preset_is_chosen_when_cheaper_than_every_op():
    # per-op times sum above the unit forward: "full" (capped at fwd) must win when all must go
    # resident 3: nothing recomputed 63, one op 43, both ops or full 23 (3 kept + 20 rematerialised)
    st = StageProblem(ops=("a", "b"), op_time=(0.8, 0.8), op_bytes=(10.0, 10.0), unit_op_bytes=((10.0, 10.0),),
                      base_bytes=1.0, full_time=1.0, fwd=1.0, bwd=2.0, weight_bytes=0.0, resident=3.0,
                      memory_limit=25.0)
    pr = RecomputeProblem((st,), 2, 4, c_non=3.0)
    assert solve(pr).sets == (frozenset({FULL}),) == brute_force(pr).sets


@pytest.mark.parametrize("seed, frac, k, lam, beta", CASES[::7])
def test_two_solves_give_the_one_weighted_sums_choice(seed, frac, k, lam, beta, monkeypatch):
    # past CP-SAT's int64 bound solve() minimises T_0, then the rest under it: the same optimum
    from ortools.sat.python import cp_model
    rng = random.Random(seed)
    prof = few_op_profile(rng)
    pr = problem(prof, k, _fraction_limit(prof, frac, 5), lam, beta, (5, 4, 3))
    one = solve(pr)
    monkeypatch.setattr(cp_model.CpModel, "validate", lambda self: "possible integer overflow (forced)")
    two = solve(pr)
    assert (one is None) == (two is None) == (brute_force(pr) is None)
    if one is not None:
        assert two.sets == one.sets == brute_force(pr).sets


def test_a_long_pipeline_is_solved_not_called_infeasible():
    # p = 64, m = 4096, 24 adjusted stages: the one weighted sum overflows int64 (CP-SAT
    # answered MODEL_INVALID, which solve() once read as "nothing fits"); every choice
    # fits here, so a solution must come back, no worse than all stages recomputing fully
    rng = random.Random(5)
    prof = few_op_profile(rng)
    st = problem(prof, 0, float("inf"), 0, 0.0, (5, 4, 3)).stages[0]
    pr = RecomputeProblem((st,) * 24, 64, 4096, c_non=st.fwd + st.bwd)
    sol = solve(pr)
    assert sol is not None and sol.status == "OPTIMAL"
    full_t0 = score_closed_form(pr, [frozenset({FULL})] * 24)[1]
    assert sol.iteration_time <= full_t0 * (1 + 1e-6)


def test_ctrl_c_stops_the_native_solve_and_propagates():
    """Ctrl-C during a CP-SAT solve: CP-SAT's own SIGINT handler would end the search
    quietly and the plan would go on; here it stops the search and raises."""
    import _thread
    import signal
    import threading

    from ortools.sat.python import cp_model

    from planner.recompute.recompute_ip import _solve_interruptibly
    rng = random.Random(0)
    model = cp_model.CpModel()   # a hard model: 60 items, 12 knapsacks, equal-ish weights
    xs = [[model.new_bool_var(f"x{i}_{k}") for k in range(12)] for i in range(60)]
    weights = [rng.randint(900, 1100) for _ in range(60)]
    for x in xs:
        model.add(sum(x) == 1)
    loads = [sum(w * x[k] for w, x in zip(weights, xs)) for k in range(12)]
    top = model.new_int_var(0, sum(weights), "top")
    for load in loads:
        model.add(top >= load)
    model.minimize(top)
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 2
    solver.parameters.max_time_in_seconds = 300
    started = threading.Event()
    solver_thread_seen = []

    def interrupt_once_solving():
        # the solve runs in its own thread: interrupt once it is there
        while not any(t.name == "obscura-cp-sat" for t in threading.enumerate()):
            started.wait(0.01)
        solver_thread_seen.append(True)
        _thread.interrupt_main(signal.SIGINT)
    # Python's own SIGINT handler, as the CLI has it (a pytest-xdist worker ignores SIGINT)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        threading.Thread(target=interrupt_once_solving, daemon=True).start()
        with pytest.raises(KeyboardInterrupt):
            _solve_interruptibly(solver, model)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert solver_thread_seen
    # the solve has returned (its response exists) and stopped early, not at its 300 s limit
    assert solver.wall_time < 200
