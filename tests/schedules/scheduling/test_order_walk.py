"""The one order walker (schedules.scheduling.order_walk): the engine's issue order and the
one-device merge are the same walk over different chains, and give, action for
action, the orders their own two walks gave (kept here as references)."""
import heapq

from hypothesis import HealthCheck, given, settings, strategies as st

from schedules import StageCosts, generate, issue_order
from schedules.deps import dependency_map
from schedules.simulator import on_one_device, op_times
from tests.budget import examples

SETTINGS = dict(deadline=None, derandomize=True, database=None, suppress_health_check=[HealthCheck.too_slow])


def _walked_issue_order(schedule, costs):
    """issue_order's own walk: rows, and other devices' inputs only."""
    times = op_times(schedule, costs)
    rows, data = schedule.rows, dependency_map(schedule)
    pos = {a: (d, i) for d, row in enumerate(rows) for i, a in enumerate(row)}
    waiting, dependents = {}, {}
    for d, row in enumerate(rows):
        for i, a in enumerate(row):
            deps = ([row[i - 1]] if i else []) + [x for x in data[a] if pos[x][0] != d]
            waiting[a] = len(deps)
            for x in deps:
                dependents.setdefault(x, []).append(a)
    heap = [(times[a][0], *pos[a], a) for a, n in waiting.items() if n == 0]
    heapq.heapify(heap)
    out = []
    while heap:
        *_, a = heapq.heappop(heap)
        out.append(a)
        for x in dependents.get(a, ()):
            waiting[x] -= 1
            if waiting[x] == 0:
                heapq.heappush(heap, (times[x][0], *pos[x], x))
    return out


def _walked_one_device_row(schedule, costs):
    """on_one_device's own walk: stages' orders, every input."""
    times, deps = op_times(schedule, costs), dependency_map(schedule)
    waiting = {a: len(deps[a]) + (i > 0) for s in schedule.stages for i, a in enumerate(s.actions)}
    after = {a: [] for a in waiting}
    for s in schedule.stages:
        for prev, a in zip(s.actions, s.actions[1:]):
            after[prev].append(a)
    for a, ds in deps.items():
        for d in ds:
            after[d].append(a)
    position = {a: i for s in schedule.stages for i, a in enumerate(s.actions)}
    ready = [(times[a][0], a.stage, position[a], a) for a, n in waiting.items() if not n]
    heapq.heapify(ready)
    row = []
    while ready:
        *_, a = heapq.heappop(ready)
        row.append(a)
        for b in after[a]:
            waiting[b] -= 1
            if not waiting[b]:
                heapq.heappush(ready, (times[b][0], b.stage, position[b], b))
    return row


@st.composite
def schedules_and_costs(draw):
    """Today's orders, some swapping (copies that start after the next compute),
    under costs with zero-length ties, launch overheads and slow links."""
    name = draw(st.sampled_from(["1f1b", "gpipe", "zb-h1", "interleaved", "zb-v", "obscura", "looped-bfs"]))
    p = draw(st.integers(2, 4))
    kw = {"virtual_stages": 2} if name in ("interleaved", "looped-bfs") else {}
    m = p * draw(st.integers(1, 3))
    if name == "obscura":     # the settings tests/schedules/test_simulator.py swaps under
        p, m = 4, draw(st.sampled_from([4, 8, 12]))
        kw = dict(adjusted=draw(st.integers(0, 2)), swap_blocks=draw(st.integers(1, 3)), swap_fraction=0.5)
    sched = generate(name, p, m, **kw)
    n = sched.num_stages
    times = st.sampled_from([0.0, 0.5, 1.0, 2.0, 3.5])
    costs = StageCosts(fwd=tuple(draw(times) for _ in range(n)), bwd=tuple(draw(times) for _ in range(n)),
                       recompute=tuple(draw(times) for _ in range(n)), act_bytes=(1e6,) * n,
                       act_bytes_recompute=(5e5,) * n, weight_bytes=(1e6,) * n, boundary_bytes=(1e6,) * n,
                       p2p_bandwidth=draw(st.sampled_from([1e6, 1e9, float("inf")])),
                       host_bandwidth=draw(st.sampled_from([1e5, 1e6, 1e9])),
                       action_overhead=draw(st.sampled_from([0.0, 0.3])))
    return sched, costs


@settings(max_examples=examples(80), **SETTINGS)
@given(schedules_and_costs())
def test_both_orders_are_the_walks_they_replaced(case):
    sched, costs = case
    assert issue_order(sched, costs) == _walked_issue_order(sched, costs)
    assert list(on_one_device(sched, costs).rows[0]) == _walked_one_device_row(sched, costs)
