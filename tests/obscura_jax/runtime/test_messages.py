"""What travels between stages (obscura_jax.runtime.messages): the messages follow the one
dependency rule, the transfer plan lists cross-process ones right after their
producer, device rows are the issue order restricted to a device, and the digest
changes with anything the processes must share."""
import jax
import pytest

import schedules
from obscura_jax.runtime.messages import Message, device_rows, message_routes, order_digest, transfer_plan
from schedules.ir import Action, Kind

SPEC = [jax.ShapeDtypeStruct((2, 16, 8), "float32")] * 3


@pytest.fixture(scope="module")
def obscura():
    sched = schedules.generate("obscura", 4, 8, adjusted=1, swap_blocks=2, swap_fraction=0.5)
    return sched, schedules.issue_order(sched)


def test_activations_go_down_and_gradients_up(obscura):
    sched, _ = obscura
    routes = message_routes(sched)
    f, b = Action(1, Kind.F, 3), Action(1, Kind.B, 3)
    assert routes.incoming[f] == (Message(Action(0, Kind.F, 3), f),)
    assert routes.outgoing[f] == (Message(f, Action(2, Kind.F, 3)),)
    assert routes.incoming[b] == (Message(Action(2, Kind.B, 3), b),)
    assert routes.outgoing[b] == (Message(b, Action(0, Kind.B, 3)),)
    assert routes.incoming[Action(0, Kind.F, 0)] == () and routes.outgoing[Action(3, Kind.F, 0)] == ()
    assert all(not routes.incoming[a] and not routes.outgoing[a] for a in routes.incoming
               if a.kind in (Kind.SO, Kind.SI))      # swaps stay on their stage
    n = sum(len(v) for v in routes.outgoing.values())
    assert n == 2 * 3 * 8                            # every boundary, both ways, every micro-batch


def test_the_plan_follows_the_order_and_skips_in_process_messages(obscura):
    sched, order = obscura
    routes = message_routes(sched)
    everyone = transfer_plan(order, routes, [0, 1, 2, 3])
    position = {a: i for i, a in enumerate(order)}
    assert len(everyone) == 48
    assert [position[m.producer] for m in everyone] == sorted(position[m.producer] for m in everyone)
    two = transfer_plan(order, routes, [0, 0, 1, 1])
    assert len(two) == 16 and all(m.boundary == 1 for m in two)
    assert transfer_plan(order, routes, [0, 0, 0, 0]) == []


def test_device_rows_are_the_schedules_rows(obscura):
    sched, order = obscura
    rows = device_rows(order, [10, 11, 12, 13], range(4))
    assert [tuple(rows[10 + d]) for d in range(4)] == list(sched.rows)
    shared = device_rows(order, [7, 7, 8, 8], [0, 1])          # this process: stages 0 and 1, one device
    assert list(shared) == [7] and shared[7] == [a for a in order if a.stage < 2]


def test_the_digest_sees_order_plan_placement_and_shapes(obscura):
    sched, order = obscura
    routes = message_routes(sched)
    plan = transfer_plan(order, routes, [0, 1, 2, 3])
    base = order_digest(sched, order, plan, [0, 1, 2, 3], SPEC)[0]
    assert order_digest(sched, list(order), list(plan), [0, 1, 2, 3], SPEC)[0] == base
    swapped = plan[:]
    swapped[0], swapped[1] = swapped[1], swapped[0]
    assert order_digest(sched, order, swapped, [0, 1, 2, 3], SPEC)[0] != base
    assert order_digest(sched, order, plan, [0, 0, 1, 1], SPEC)[0] != base
    bf16 = [jax.ShapeDtypeStruct((2, 16, 8), "bfloat16")] * 3
    assert order_digest(sched, order, plan, [0, 1, 2, 3], bf16)[0] != base
    assert order_digest(sched, order, plan, [0, 1, 2, 3], SPEC, {"steps": 3})[0] != base
    assert "48 transfers" in order_digest(sched, order, plan, [0, 1, 2, 3], SPEC)[1]
