"""The one list scheduler (schedules.scheduling.list_schedule) over the per-kind table
(schedules.actions): the relaxations, re-simulated with the same settings, give
their own makespan, with launch overheads and links shared next to swapping
stages (the simulator and the relaxations are the same loop); and every path that
gives actions, copies or syncs times (the simulator, the issue order and the
one-device merge, the deadlock check, the measured timeline and its copies, the
data-parallel sync) gets them from that loop: a path with a walk of its own would
neither call it nor move with it."""
import math
import sys
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, assume, given, settings, strategies as st

import schedules.scheduling.list_schedule as list_schedule_module
from schedules import Action, Kind, Schedule, StageCosts, StageSpec, generate, issue_order, simulate, validate
from schedules.errors import ScheduleError
from schedules.generators.caps import held_peaks
from schedules.generators.common import one_f_one_b_row
from schedules.generators.device_relax import DeviceRelaxation
from schedules.generators.relax import relaxed_rows
from schedules.generators.strawman import strawman_warmup
from schedules.scheduling.list_schedule import Run
from schedules.simulator import on_one_device, price_schedule
from tests.budget import examples

SETTINGS = dict(deadline=None, derandomize=True, database=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def realistic_costs(draw, n):
    """Random stage costs with the realism terms: launch overhead per action and a
    share of the p2p links taken by swapping neighbours."""
    fwd = [draw(st.floats(0.1, 3.0)) for _ in range(n)]
    return StageCosts(fwd=tuple(fwd), bwd=tuple(f * draw(st.floats(1.0, 3.0)) for f in fwd),
                      recompute=tuple(f * draw(st.floats(0.0, 1.2)) for f in fwd),
                      boundary_bytes=tuple(draw(st.sampled_from([0.0, 0.5, 2.0])) for _ in range(n)),
                      p2p_latency=draw(st.sampled_from([0.0, 0.05, 0.3])),
                      p2p_bandwidth=draw(st.sampled_from([math.inf, 4.0, 20.0])),
                      action_overhead=draw(st.sampled_from([0.0, 0.05, 0.3, 1.0])),
                      link_sharing=draw(st.sampled_from([0.0, 0.25, 0.5, 0.9])))


def _settings(stages, swapping, adjusted):
    return tuple(StageSpec((), ("full",) if s in adjusted else (), 0.5 if s in swapping else 0.0,
                           1 if s in swapping else 0) for s in range(stages))


@st.composite
def stage_relaxations(draw):
    """Obscura on 1F1B: adjusted stages relaxed under caps, the rest 1F1B; some
    stages swap (their links are shared). Hypothesis counts the cases that run
    (a deadlock is assumed away): 100 in make test, 1,000 in make test-long."""
    p, m = draw(st.integers(2, 6)), draw(st.integers(2, 12))
    k = draw(st.integers(0, p - 1))
    adj = set(range(k + 1))
    straw = strawman_warmup(p, m, adj)
    caps = {s: draw(st.integers(max(1, min(m, p - s) - 1), straw[s])) for s in adj}
    swapping = {s for s in range(p) if draw(st.booleans())}
    return p, m, adj, caps, swapping, draw(realistic_costs(p))


@st.composite
def device_relaxations(draw):
    """Obscura on today's schedules: a base order relaxed on some devices under caps."""
    name = draw(st.sampled_from(["interleaved", "zb-h1", "zb-h1-capped", "1f1b", "zb-v", "interleaved-zb"]))
    p, m = draw(st.integers(2, 4)), draw(st.integers(2, 8))
    kw = {"virtual_stages": 2} if name in ("interleaved", "interleaved-zb") else {}
    if kw:
        m = p * -(-m // p)     # the chunked orders need m to be a multiple of p
    base = generate(name, p, m, adjusted="all", recompute=("full",), **kw)
    swapping = {s for s in range(base.num_stages) if draw(st.booleans())}
    base = replace(base, stages=tuple(replace(spec, swap_fraction=0.5 if s in swapping else 0.0,
                                              swap_blocks=1 if s in swapping else 0)
                                      for s, spec in enumerate(base.stages)))
    held = held_peaks(base.rows)
    caps = {d: draw(st.integers(1, held[d] + 2)) for d in range(base.num_devices) if draw(st.booleans())}
    return base, caps, draw(realistic_costs(base.num_stages))


@settings(max_examples=examples(60), **SETTINGS)
@given(stage_relaxations())
def test_the_relaxation_of_obscura_on_1f1b_resimulates_to_its_own_makespan(case):
    p, m, adj, caps, swapping, costs = case
    fixed = {s: one_f_one_b_row(s, m, min(p - s, m)) for s in range(p) if s not in adj}
    try:
        rows, t = relaxed_rows(p, m, fixed, caps, costs, adj, swapping=swapping)
    except ScheduleError:      # these caps deadlock the fixed rows: not a case
        assume(False)
    stages = tuple(replace(spec, actions=tuple(rows[s])) for s, spec in enumerate(_settings(p, swapping, adj)))
    assert simulate(Schedule("relaxed", p, m, stages), costs).makespan == t


def _as_schedule(base: Schedule, rows) -> Schedule:
    """A relaxation's device rows as a schedule the simulator takes."""
    return Schedule("relaxed", base.num_stages, base.num_microbatches,
                    tuple(replace(spec, actions=()) for spec in base.stages), base.stage_to_device,
                    tuple(tuple(r) for r in rows))


@settings(max_examples=examples(40), **SETTINGS)
@given(device_relaxations())
def test_the_device_relaxation_resimulates_to_its_own_makespan(case):
    base, caps, costs = case
    found = DeviceRelaxation(base, costs)(caps)
    assume(found is not None)  # these caps deadlock: not a case
    rows, t = found
    assert simulate(_as_schedule(base, rows), costs).makespan == t


@settings(max_examples=examples(15), **SETTINGS)
@given(device_relaxations(), st.sampled_from([frozenset(), frozenset({Kind.W}), frozenset({Kind.W, Kind.F})]),
       st.booleans())
def test_gap_fitting_choosers_resimulate_and_keep_their_caps(case, fits, merge_forwards):
    """Relaxed.fits (a W, or a warm-up F, only in a gap it fits) and one forward
    queue per device: the same loop, so the simulator gives the rows the same
    makespan, and no capped device holds more blocks than its cap."""
    base, caps, costs = case
    found = DeviceRelaxation(base, costs, merge_forwards=merge_forwards)(caps, fits=fits)
    assume(found is not None)  # these caps deadlock: not a case
    rows, t = found
    assert simulate(_as_schedule(base, rows), costs).makespan == t
    held = held_peaks(rows)
    assert all(held[d] <= cap for d, cap in caps.items())


def test_byte_sizes_cap_what_a_relaxed_device_holds():
    """With sizes (rise, net) the cap counts their units: three blocks of 1 under a
    cap of 2.5 hold two at a time, the third F waits for a W."""
    base = generate("zb-h1", 2, 3)
    sizes = {a: ((1.0, 1.0) if a.kind is Kind.F else (0.0, -1.0) if a.kind is Kind.W else (0.0, 0.0))
             for row in base.rows for a in row}
    rows, _ = DeviceRelaxation(base, StageCosts.uniform(2, 1.0, 2.0, 0.0))({0: 2.5, 1: 2.5}, sizes=sizes)
    assert held_peaks(rows) == (2, 2)
    rows, _ = DeviceRelaxation(base, StageCosts.uniform(2, 1.0, 2.0, 0.0))({0: 3.0, 1: 3.0}, sizes=sizes)
    assert held_peaks(rows)[0] == 3


def test_the_relaxation_counts_the_action_overhead_as_the_simulator_does():
    """Obscura, p = 4, m = 8, adjusted 0..1, action_overhead 0.3: the relaxation said
    36.0 and the simulator 41.6 when the relaxations ignored the overhead."""
    from schedules.generators.obscura import migration_caps
    costs = StageCosts.uniform(4, 1.0, 2.0, 1.0, action_overhead=0.3)
    _, t, _ = migration_caps(4, 8, (0, 1), costs)
    assert t == simulate(generate("obscura", 4, 8, adjusted=1, costs=costs), costs).makespan
    assert round(t, 9) == 41.6


# --- every timing path goes through the one list scheduler ------------------------

SHIFT = 1024.0
ORIGINAL = list_schedule_module.list_schedule


@pytest.fixture
def scheduler_runs(monkeypatch):
    """schedules.scheduling.list_schedule.list_schedule, wherever a module bound it, counting its
    runs and handing back every time SHIFT later: a path that gives times of its own
    (a second walk) neither counts nor moves."""
    import obscura_jax.observe.events  # noqa: F401  lazy: JAX; bound before the patch, like every other caller
    import planner.layouts.mesh_costs  # noqa: F401  lazy: as above

    original = ORIGINAL
    runs = []

    def shifted(run, *args, **kwargs):
        done = original(run, *args, **kwargs)
        runs.append(run)
        return Run([t + SHIFT for t in done.start], [None if t is None else t + SHIFT for t in done.end],
                   done.order, done.complete, done.past_limit, {i: t + SHIFT for i, t in done.halves.items()},
                   done.paused, done.stopped + SHIFT, done.waiting)

    for module in list(sys.modules.values()):
        if getattr(module, "list_schedule", None) is original:
            monkeypatch.setattr(module, "list_schedule", shifted)
    return runs


def test_simulation_orders_and_the_deadlock_check_are_the_list_schedulers(scheduler_runs):
    sched, costs = generate("zb-h1", 3, 6), StageCosts.uniform(3, 1.0, 2.0, 1.0)
    run = price_schedule(sched, costs)
    done = ORIGINAL(run)
    reference = sorted((a + SHIFT, b + SHIFT) for a, b in map(done.span, range(len(run.actions))))
    assert sorted((o.start, o.end) for o in simulate(sched, costs, check=False).ops) == reference
    for path in (issue_order, on_one_device):
        scheduler_runs.clear()
        path(sched, costs)
        assert scheduler_runs, path.__name__     # its order walks the scheduler's starts
    stuck = Schedule("stuck", 2, 2, tuple(StageSpec(tuple(Action.parse(a, s) for a in r.split()))
                                          for s, r in enumerate(("F0 B0 F1 B1", "F0 F1 B0 B1"))))
    scheduler_runs.clear()
    with pytest.raises(ScheduleError, match="deadlock"):
        validate(stuck)
    assert len(scheduler_runs) == 1          # a deadlock is the scheduler's "did not complete"


def test_measured_times_and_data_syncs_are_the_list_schedulers(scheduler_runs):
    from obscura_jax.observe.events import ActionEvent, TransferEvent, infer_ops, infer_transfers  # lazy: JAX
    from planner.layouts.mesh_costs import StageSync, gradient_sync_end  # lazy: as above (the fixture imported both)

    f0, f1 = Action(0, Kind.F, 0), Action(1, Kind.F, 0)
    ops = infer_ops([ActionEvent(f0, 0, 10.0, 12.0), ActionEvent(f1, 1, 10.1, 15.0)], 2, [f0, f1], origin=10.0)
    assert [(o.start, o.end) for o in ops] == [(SHIFT, 2.0 + SHIFT), (2.0 + SHIFT, 5.0 + SHIFT)]
    scheduler_runs.clear()
    (moved,) = infer_transfers([TransferEvent("0F0->1F0", 0, 1, 1, 12.5, 13.0)], [], 10.0)
    assert len(scheduler_runs) == 1 and (moved.start, moved.end) == (2.5 + SHIFT, 3.0 + SHIFT)
    timeline = simulate(generate("1f1b", 2, 2), StageCosts.uniform(2, 1.0, 2.0, 0.0))
    last = max(max(o.end for o in timeline.stage_ops(s) if o.kind is Kind.B) for s in (0, 1))
    scheduler_runs.clear()
    end, _ = gradient_sync_end(timeline, [StageSync(0.5), StageSync(0.5)], overlap_backward=False)
    assert len(scheduler_runs) == 1 and end == (last + 0.5) + SHIFT
