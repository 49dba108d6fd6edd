import pytest

from schedules import SCHEDULES, Kind, ScheduleError, StageCosts, generate, issue_order, simulate
from schedules.generators.common import one_f_one_b_row, resolve_adjusted, warmup_count
from schedules.generators.obscura import migration_caps
from schedules.generators.swap import add_swaps


def test_registry_names_and_docstring_pictures():
    assert {"gpipe", "1f1b", "recomp", "strawman", "obscura"} <= set(SCHEDULES)
    import sys
    for gen in SCHEDULES.values():
        doc = sys.modules[gen.__module__].__doc__
        # the p=4, m=8 picture; rows are devices when a device runs several stages
        assert any(f"{row} 0 |" in doc and f"{row} 3 |" in doc for row in ("stage", "device")), gen.__module__


def test_unknown_name_lists_valid_ones():
    with pytest.raises(ScheduleError, match="unknown schedule 'zb'; valid: gpipe, 1f1b, recomp"):
        generate("zb", 4, 8)


@pytest.mark.parametrize("args,needle", [
    ((0, 8), "number of stages must be >= 1"), ((4, 0), "number of micro-batches must be >= 1"),
    ((4.0, 8), "must be an integer"), ((4, True), "must be an integer"),
])
def test_bad_sizes(args, needle):
    for name in SCHEDULES:
        with pytest.raises(ScheduleError, match=needle):
            generate(name, *args)


@pytest.mark.parametrize("adjusted,expected", [(None, ()), (0, (0,)), (2, (0, 1, 2)), ("all", (0, 1, 2, 3)),
                                               ("1", (0, 1)), ("none", ()), ((3, 1), (1, 3))])
def test_resolve_adjusted(adjusted, expected):
    assert resolve_adjusted(adjusted, 4) == expected


@pytest.mark.parametrize("adjusted", [4, -1, "x", (0, 4), True])
def test_resolve_adjusted_rejects(adjusted):
    with pytest.raises(ScheduleError):
        resolve_adjusted(adjusted, 4)


def test_adjusted_sets_recompute_attribute():
    s = generate("recomp", 4, 8, adjusted=1, recompute=("mlp_act", "mlp_mul"))
    assert [spec.recompute for spec in s.stages] == [("mlp_act", "mlp_mul")] * 2 + [()] * 2
    assert s.adjusted_stages == (0, 1)
    assert generate("recomp", 4, 8).adjusted_stages == (0, 1, 2, 3)   # Recomp-All by default
    assert generate("1f1b", 4, 8).adjusted_stages == ()
    with pytest.raises(ScheduleError, match="recompute must be a non-empty"):
        generate("recomp", 4, 8, recompute=())


def test_dapple_plus_is_1f1b_all_is_recomp_all():
    a, b = generate("1f1b", 4, 8, adjusted="all"), generate("recomp", 4, 8, adjusted="all")
    assert a.stages == b.stages


@pytest.mark.parametrize("p,m", [(4, 8), (4, 2), (8, 64), (3, 3)])
def test_warmup_counts(p, m):
    one = generate("1f1b", p, m)
    straw = generate("strawman", p, m, adjusted=p - 1)
    for s in range(p):
        assert warmup_count(one.actions(s)) == min(p - s, m)
        assert warmup_count(straw.actions(s)) == min(m, 3 * (p - s - 1) + 1)
    gp = generate("gpipe", p, m)
    assert all(warmup_count(gp.actions(s)) == m for s in range(p))


def test_1f1b_explicit_warmup():
    s = generate("1f1b", 4, 8, warmup=(6, 3, 2, 1))
    assert warmup_count(s.actions(0)) == 6
    with pytest.raises(ScheduleError, match="warmup must hold 4"):
        generate("1f1b", 4, 8, warmup=(6, 3))
    with pytest.raises(ScheduleError, match="deadlock"):
        generate("1f1b", 4, 8, warmup=(2, 3, 2, 1))


def _inflight(row):
    n = peak = 0
    for a in row:
        n += (a.kind == Kind.F) - (a.kind == Kind.B)
        peak = max(peak, n)
    return peak


@pytest.mark.parametrize("p,m,k", [(4, 8, 0), (4, 8, 1), (4, 16, 2), (8, 16, 4), (8, 32, 7), (2, 1, 1)])
def test_obscura_caps_never_exceed_strawman_and_time_never_worse(p, m, k):
    costs = StageCosts.uniform(p, 1, 2, 1)
    ob, st = generate("obscura", p, m, adjusted=k), generate("strawman", p, m, adjusted=k)
    assert simulate(ob, costs).makespan <= simulate(st, costs).makespan + 1e-9
    for s in range(p):
        assert _inflight(ob.actions(s)) <= _inflight(st.actions(s))
        if s > k:
            assert ob.actions(s) == generate("1f1b", p, m).actions(s)   # non-adjusted stages keep 1F1B


def test_migration_optimization_lowers_early_stages():
    # p=8, m=32, K=4 (f=1, b=2, r=1): the strawman holds 22/19/16/13/10 on stages 0..4
    caps, t, rows = migration_caps(8, 32, (0, 1, 2, 3, 4), StageCosts.uniform(8, 1, 2, 1))
    assert [caps[s] for s in range(5)] == [11, 10, 10, 10, 10] and t == 144
    assert rows == [list(spec.actions) for spec in generate("obscura", 8, 32, adjusted=4).stages]


def test_obscura_warmup_fixes_the_caps():
    s = generate("obscura", 4, 16, adjusted=1, warmup=(5, 4, 2, 1))
    assert _inflight(s.actions(0)) <= 5 and _inflight(s.actions(1)) <= 4
    with pytest.raises(ScheduleError, match=r"warmup\[0\]=1 deadlocks"):
        generate("obscura", 4, 16, adjusted=1, warmup=(1, 4, 2, 1))


def test_obscura_uses_the_given_costs():
    slow_stage1 = StageCosts(fwd=(1, 1, 1, 1), bwd=(2, 2, 2, 2), recompute=(1, 3, 0, 0))
    a = generate("obscura", 4, 16, adjusted=1, costs=slow_stage1)
    b = generate("obscura", 4, 16, adjusted=1)
    st = generate("strawman", 4, 16, adjusted=1)
    assert simulate(a, slow_stage1).makespan <= simulate(st, slow_stage1).makespan + 1e-9
    assert a != b
    with pytest.raises(ScheduleError, match="costs describe 3 stages"):
        generate("obscura", 4, 8, costs=StageCosts.uniform(3))


def test_swap_pass_phases():
    row = one_f_one_b_row(0, 8, 5)
    out = " ".join(map(str, add_swaps([row], [2])[0]))
    assert out == ("F0 F1 SO1 F2 SO2 F3 F4 B0 F5 SO5 SI1 B1 F6 SO6 SI2 B2 F7 SO7 SI5 "
                   "B3 SI6 B4 SI7 B5 B6 B7")


def test_swap_blocks_defaults_and_limits():
    s = generate("obscura", 4, 8, adjusted=1, swap_blocks=2, swap_fraction=0.5)
    assert [spec.swap_blocks for spec in s.stages] == [3, 2, 0, 0]
    assert [spec.swap_fraction for spec in s.stages] == [0.5, 0.5, 0.0, 0.0]
    t = generate("strawman", 4, 8, adjusted=1, swap_blocks=(1, 0, 1, 0), swap_fraction=1.0)
    assert [spec.swap_blocks for spec in t.stages] == [1, 0, 1, 0]
    for kw, needle in [(dict(swap_blocks=2), "needs a swap fraction"),
                       (dict(swap_blocks=9, swap_fraction=1.0), "must be <= "),
                       (dict(swap_blocks=(1, 1), swap_fraction=1.0), "must hold 4 integers"),
                       (dict(swap_blocks=1, swap_fraction=1.5), r"in \[0, 1\]"),
                       (dict(swap_blocks=-1, swap_fraction=1.0), ">= 0")]:
        with pytest.raises(ScheduleError, match=needle):
            generate("obscura", 4, 8, adjusted=1, **kw)
    with pytest.raises(ScheduleError, match="none is adjusted"):
        generate("1f1b", 4, 8, swap_blocks=1, swap_fraction=1.0)


def test_swaps_cut_peak_memory_and_hide_under_compute():
    costs = StageCosts.uniform(4, 1, 2, 1, act_bytes=1.0, host_bandwidth=4.0)
    plain = simulate(generate("obscura", 4, 16, adjusted=1), costs)
    swapped = simulate(generate("obscura", 4, 16, adjusted=1, swap_blocks=2, swap_fraction=1.0), costs)
    assert swapped.makespan == plain.makespan            # 0.25 per transfer hides fully
    for s in (0, 1):
        assert swapped.stages[s].peak_activation_bytes < plain.stages[s].peak_activation_bytes
        assert swapped.stages[s].peak_inflight_microbatches == plain.stages[s].peak_inflight_microbatches


@pytest.mark.parametrize("name", ["1f1b", "obscura", "gpipe"])
def test_issue_order_respects_every_dependency(name):
    s = generate(name, 4, 8, adjusted=1, swap_blocks=1, swap_fraction=1.0)
    order = issue_order(s)
    assert sorted(order) == sorted(a for st in s.stages for a in st.actions)
    pos = {a: i for i, a in enumerate(order)}
    for st in s.stages:
        idx = [pos[a] for a in st.actions]
        assert idx == sorted(idx)
    for a in order:
        if a.kind == Kind.F and a.stage > 0:
            assert pos[a] > pos[type(a)(a.stage - 1, Kind.F, a.microbatch)]
        if a.kind == Kind.B and a.stage < 3:
            assert pos[a] > pos[type(a)(a.stage + 1, Kind.B, a.microbatch)]
    times = simulate(s, StageCosts.uniform(4)).ops
    start = {(o.stage, o.action): o.start for o in times}
    starts = [start[(a.stage, str(a))] for a in order]
    assert starts == sorted(starts)


@pytest.mark.parametrize("name,p,extra,needle", [
    ("interleaved", 4, {"virtual_stages": 100000}, "number of stages must be <= 1024, got 400000"),
    ("looped-bfs", 64, {"virtual_stages": 32}, "number of stages must be <= 1024, got 2048"),
    ("zb-v", 1000, {}, "number of stages must be <= 1024, got 2000"),
    ("v-min", 1000, {}, "number of stages must be <= 1024, got 2000"),
    ("interleaved", 512, {}, "stages x micro-batches must be <= 65536, got 1024 x 128"),
])
def test_generate_bounds_the_model_stages_first(name, p, extra, needle):
    """p x V model stages are bounded before generating (one line, at once)."""
    import time
    t0 = time.process_time()
    with pytest.raises(ScheduleError, match=needle):
        generate(name, p, 128 if p == 512 else 8, **extra)
    assert time.process_time() - t0 < 1.0  # CPU, not wall time: a busy machine is not a bug
