"""The one dependency rule (schedules.deps) and that its former copies are gone."""
from pathlib import Path

import pytest

from schedules import Action, Kind, generate
from schedules.actions import StagePrice, priced
from schedules.costs import StageCosts
from schedules.deps import dependencies, dependency_map

A = Action
F, B, I, W, SO, SI = Kind.F, Kind.B, Kind.I, Kind.W, Kind.SO, Kind.SI  # noqa: E741


@pytest.mark.parametrize("action,present,expected", [
    (A(0, F, 3), (), ()),
    (A(2, F, 3), (), (A(1, F, 3),)),
    (A(3, B, 1), (), (A(3, F, 1),)),                                   # last stage: its own forward
    (A(1, B, 1), (), (A(1, F, 1), A(2, B, 1))),
    (A(1, I, 1), {A(2, I, 1)}, (A(1, F, 1), A(2, I, 1))),               # upstream waits for I, not W
    (A(1, B, 1), {A(2, I, 1)}, (A(1, F, 1), A(2, I, 1))),
    (A(1, B, 1), {A(1, SI, 1)}, (A(1, F, 1), A(2, B, 1), A(1, SI, 1))),
    (A(1, W, 1), {A(1, I, 1)}, (A(1, I, 1),)),
    (A(1, W, 1), (), (A(1, B, 1),)),                                   # older B + W spelling
    (A(1, SO, 1), (), (A(1, F, 1),)),
    (A(1, SI, 1), (), (A(1, SO, 1),)),
])
def test_rule(action, present, expected):
    assert dependencies(action, present, 4) == expected


def test_backward_input_and_map_over_a_zero_bubble_v():
    s = generate("zb-v", 2, 3)       # stages 0, 1 on devices 0, 1; stage 2 on device 1, stage 3 on device 0
    deps = dependency_map(s)
    assert set(deps) == {a for row in s.rows for a in row}
    assert deps[A(2, F, 0)] == (A(1, F, 0),)                      # the turn of the V, same device
    assert deps[A(1, I, 0)] == (A(1, F, 0), A(2, I, 0))
    assert deps[A(2, I, 0)] == (A(2, F, 0), A(3, I, 0))           # stage 3 splits its backward: I, not B


def test_transfer_lag_only_between_devices():
    """The priced table: an input from another device waits for the p2p transfer over
    the boundary between the two stages; one from the same device does not."""
    rows = [(A(0, F, 0), A(3, F, 0)), (A(1, F, 0), A(2, F, 0))]     # stages 0, 3 on device 0; 1, 2 on 1
    where = (0, 1, 1, 0)
    lags = [10.0, 11.0, 12.0, 13.0]          # time over the boundary s -> s+1
    costs = StageCosts.uniform(4)
    run = priced(rows, 4, where, [StagePrice(costs, s, False, 0.0) for s in range(4)], lags)
    lag = {(run.actions[j], run.actions[i]): run.lag[b] for i, on in enumerate(run.deps) for j, b in on}
    assert lag == {(A(0, F, 0), A(1, F, 0)): 10.0, (A(1, F, 0), A(2, F, 0)): 0.0,
                   (A(2, F, 0), A(3, F, 0)): 12.0}


def test_no_other_copy_of_the_rule():
    """Who reads dependencies reads them from the table's column (schedules.actions,
    through schedules.deps or the priced table) and defines no rule of its own."""
    root = Path(__file__).resolve().parents[2]
    for path in ("schedules/validator.py", "schedules/ordering.py", "schedules/simulator.py",
                 "schedules/timeline.py", "schedules/generators/relax.py", "schedules/generators/device_relax.py",
                 "obscura_jax/observe/events.py", "obscura_jax/runtime/messages.py"):
        text = (root / path).read_text()
        assert "from schedules.deps import" in text or "from schedules.actions import" in text \
            or "from schedules.simulator import price_schedule" in text, path
        for old in ("def _cross_dep", "def _cross_deps", "def _dependencies", "def _comm_wait", "def _rule"):
            assert old not in text, (path, old)


def test_the_rule_is_the_tables_waits_column():
    from schedules.actions import KINDS
    present = {A(1, I, 0), A(2, I, 0), A(1, SI, 0)}
    for kind in Kind:
        assert dependencies(A(1, kind, 0), present, 4) == KINDS[kind].waits(1, 0, present.__contains__, 4)
