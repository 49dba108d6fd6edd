"""ZB-H1 (the paper's and the capped one), ZB-H2 and ZB-V, and the exact optima
behind the ZB-H1 acceptance figures (CP-SAT)."""
import pytest

from schedules import Kind, StageCosts, generate, simulate
from schedules.formats.text import timeline_ascii

UNIT = StageCosts.uniform(4, 1.0, 2.0, 0.0)    # f = 1, I = W = 1


def optimum(p: int, m: int, cap: bool) -> tuple[str, int]:
    """Shortest makespan of any per-stage F/I/W order with unit times, the dependency
    rule (F(s-1) -> F(s), I(s+1) -> I(s), F -> I -> W), each stage's queues in
    micro-batch order (the IR's rule) and, with `cap`, at most p-s micro-batches on
    stage s between the start of their F and the end of their W."""
    horizon = 3 * (m + p)
    from ortools.sat.python import cp_model  # lazy: collection must not need OR-Tools (the GPU machine lacks it)
    model = cp_model.CpModel()
    t = {}
    for s in range(p):
        intervals = []
        for k in "FIW":
            for x in range(m):
                t[k, s, x] = model.NewIntVar(0, horizon, f"{k}{s}_{x}")
                intervals.append(model.NewFixedSizeIntervalVar(t[k, s, x], 1, f"run{k}{s}_{x}"))
        model.AddNoOverlap(intervals)
    for s in range(p):
        for x in range(m):
            if s > 0:
                model.Add(t["F", s, x] >= t["F", s - 1, x] + 1)
            model.Add(t["I", s, x] >= t["F", s, x] + 1)
            if s < p - 1:
                model.Add(t["I", s, x] >= t["I", s + 1, x] + 1)
            model.Add(t["W", s, x] >= t["I", s, x] + 1)
            if x:
                for k in "FIW":
                    model.Add(t[k, s, x] >= t[k, s, x - 1] + 1)
        if cap:
            held = []
            for x in range(m):
                size = model.NewIntVar(2, horizon + 1, f"size{s}_{x}")
                end = model.NewIntVar(0, horizon + 1, f"end{s}_{x}")
                model.Add(end == t["W", s, x] + 1)
                held.append(model.NewIntervalVar(t["F", s, x], size, end, f"held{s}_{x}"))
            model.AddCumulative(held, [1] * m, p - s)
    makespan = model.NewIntVar(0, horizon + 1, "makespan")
    for s in range(p):
        model.Add(makespan >= t["W", s, m - 1] + 1)
    model.Minimize(makespan)
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 2
    solver.parameters.max_time_in_seconds = 60
    status = solver.Solve(model)
    return solver.StatusName(status), int(solver.Value(makespan))


@pytest.mark.parametrize("p,m,want", [(4, 8, 27), (8, 32, 103)])
def test_zb_h1_acceptance_bubble_is_a_third_of_1f1bs(p, m, want):
    costs = StageCosts.uniform(p, 1.0, 2.0, 0.0)
    one = simulate(generate("1f1b", p, m), costs).makespan
    zb = simulate(generate("zb-h1", p, m), costs).makespan
    assert zb == pytest.approx(want)
    assert zb - m * 3 == pytest.approx(p - 1) and one - m * 3 == pytest.approx(3 * (p - 1))


def test_zb_h1_memory_rule():
    """At most p-s micro-batches on stage s until their I, up to p until their W;
    stage 0's peak is 1F1B's once I frees what W does not need."""
    until_i = StageCosts.uniform(4, 1.0, 2.0, 0.0, act_bytes=1.0, freed_by_input_grad=1.0)
    tl = simulate(generate("zb-h1", 4, 8), until_i)
    assert [st.peak_activation_bytes for st in tl.stages] == [4, 3, 2, 1]
    assert [st.peak_inflight_microbatches for st in tl.stages] == [4, 4, 4, 4]
    half = StageCosts.uniform(4, 1.0, 2.0, 0.0, act_bytes=1.0, freed_by_input_grad=0.5)
    zb = simulate(generate("zb-h1", 4, 8), half).stages
    one = simulate(generate("1f1b", 4, 8), half).stages
    assert zb[0].peak_activation_bytes <= one[0].peak_activation_bytes == 4
    assert [st.peak_activation_bytes for st in zb] == [4, 3.5, 3, 2.5]


def test_zb_h1_capped_acceptance_30_and_holds_p_minus_s():
    tl = simulate(generate("zb-h1-capped", 4, 8), UNIT)
    assert tl.makespan == pytest.approx(30)
    assert simulate(generate("1f1b", 4, 8), UNIT).makespan == pytest.approx(33)
    assert [st.peak_inflight_microbatches for st in tl.stages] == [4, 3, 2, 1]


def test_30_is_optimal_under_the_cap_and_27_without():
    """The capped ZB-H1 reaches the capped optimum, the paper's the uncapped one."""
    assert optimum(4, 8, cap=True) == ("OPTIMAL", 30)
    assert optimum(4, 8, cap=False) == ("OPTIMAL", 27)


@pytest.mark.parametrize("p,m", [(2, 3), (4, 4), (4, 16), (8, 8)])
def test_zb_h1_capped_beats_1f1b_by_a_w_per_stage_and_the_papers_by_two(p, m):
    costs = StageCosts.uniform(p, 1.0, 2.0, 0.0)
    capped, one = simulate(generate("zb-h1-capped", p, m), costs), simulate(generate("1f1b", p, m), costs)
    paper = simulate(generate("zb-h1", p, m), costs)
    assert one.makespan == pytest.approx((m + p - 1) * 3)
    assert capped.makespan == pytest.approx(one.makespan - (p - 1))
    assert paper.makespan == pytest.approx(one.makespan - 2 * (p - 1))
    assert [st.peak_inflight_microbatches for st in capped.stages] == [min(p - s, m) for s in range(p)]


@pytest.mark.parametrize("p,m", [(1, 1), (2, 1), (4, 2), (4, 5), (3, 7)])
def test_zb_h1_is_valid_for_any_size(p, m):
    s = generate("zb-h1", p, m)
    assert sum(len(r) for r in s.rows) == p * m * 3


def test_zb_h1_capped_warmup_override():
    s = generate("zb-h1-capped", 4, 8, warmup=(6, 4, 2, 1))
    assert [a.kind for a in s.actions(0)[:7]] == [Kind.F] * 6 + [Kind.I]


def test_zb_v_places_a_v_and_reaches_a_small_bubble():
    s = generate("zb-v", 4, 8)
    assert s.stage_to_device == (0, 1, 2, 3, 3, 2, 1, 0) and s.num_stages == 8
    tl = simulate(s, StageCosts.uniform(8, 0.5, 1.0, 0.0, act_bytes=0.5))
    assert tl.makespan == pytest.approx(25.5)             # 24 of work per device + 1.5
    assert [st.peak_inflight_microbatches for st in tl.stages] == [8, 8, 8, 8]
    assert [st.peak_activation_bytes for st in tl.stages] == [4.0] * 4    # 1F1B's stage-0 peak, on every device


@pytest.mark.parametrize("p,m", [(1, 1), (2, 1), (3, 2), (4, 5), (4, 7), (3, 12)])
def test_zb_v_is_valid_for_few_micro_batches_too(p, m):
    s = generate("zb-v", p, m)
    assert sum(len(r) for r in s.rows) == 2 * p * m * 3


GRID = [(p, m) for p in (1, 2, 3, 4, 6) for m in (1, 2, 3, p, 2 * p + 1, 4 * p)]


@pytest.mark.parametrize("p,m", GRID)
def test_zb_h2_is_valid_and_a_parallelogram_at_unit_costs(p, m):
    """For m >= p the makespan is 3m + p - 1, the bound under a synchronous step
    (the last stage starts at p - 1); once stage 0 has its 2p-1 warm-up forwards
    every stage runs without a gap from its first F to its last W (3m: the
    paper's zero bubble)."""
    s = generate("zb-h2", p, m)
    assert sum(len(r) for r in s.rows) == 3 * p * m
    tl = simulate(s, StageCosts.uniform(p, 1.0, 2.0, 0.0))
    if m >= p:
        assert tl.makespan == pytest.approx(3 * m + p - 1)
    if m >= 2 * p - 1:
        for st in range(p):
            ops = [o for o in tl.ops if o.stage == st]
            assert min(o.start for o in ops) == pytest.approx(st)
            assert max(o.end for o in ops) - min(o.start for o in ops) == pytest.approx(3 * m)


@pytest.mark.parametrize("p,m", GRID)
def test_zb_h2_holds_2p_minus_1_blocks_about_twice_1f1bs_peak(p, m):
    """At most 2p-1 micro-batches between F and W on every stage; with M_W < M_B
    stage 0 reaches (2p-1) M_B, twice 1F1B's p M_B less one block, and no stage
    more."""
    held = simulate(generate("zb-h2", p, m), StageCosts.uniform(p, 1.0, 2.0, 0.0, act_bytes=1.0))
    assert [st.peak_inflight_microbatches for st in held.stages] == [min(2 * p - 1, m)] * p
    paper = StageCosts.uniform(p, 1.0, 2.0, 0.0, act_bytes=1.0, freed_by_input_grad=0.25)
    zb = [st.peak_activation_bytes for st in simulate(generate("zb-h2", p, m), paper).stages]
    one = [st.peak_activation_bytes for st in simulate(generate("1f1b", p, m), paper).stages]
    assert zb[0] == max(zb) == min(2 * p - 1, m) and max(one) == min(p, m)


def test_zb_h2_warms_up_with_2p_minus_1_minus_2s_forwards():
    from schedules.generators.common import warmup_count
    assert [warmup_count(r) for r in generate("zb-h2", 4, 8).rows] == [7, 5, 3, 1]


def test_docstring_pictures_are_current():
    import schedules.generators.zero_bubble as mod
    for name, costs in (("zb-h1", UNIT), ("zb-h1-capped", UNIT), ("zb-h2", UNIT),
                        ("zb-v", StageCosts.uniform(8, 1.0, 2.0, 0.0))):
        tl = simulate(generate(name, 4, 8), costs)
        assert "\n".join("    " + ln for ln in timeline_ascii(tl).splitlines()) in mod.__doc__
