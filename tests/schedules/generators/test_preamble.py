"""One argument preamble (schedules.generators.common.setup) for every registered
generator: the same bad argument is refused by each with the same ScheduleError,
and the same good argument is taken by each. Generators are called directly, not
through `generate` (whose own size bounds would answer first)."""
from __future__ import annotations

import inspect
import math
import re

import pytest

from schedules.errors import ScheduleError
from schedules.generators import SCHEDULES
from schedules.generators.common import setup

P, M = 2, 4

BAD = [
    ({"num_stages": 0}, "number of stages must be >= 1"),
    ({"num_stages": True}, "number of stages must be an integer"),
    ({"num_stages": 2.0}, "number of stages must be an integer"),
    ({"num_microbatches": 0}, "number of micro-batches must be >= 1"),
    ({"num_microbatches": 1.5}, "number of micro-batches must be an integer"),
    ({"adjusted": 99}, "adjusted K=99 must be in 0.."),
    ({"adjusted": -1}, "adjusted K=-1 must be in 0.."),
    ({"adjusted": True}, "adjusted must be an integer K"),
    ({"adjusted": "bogus"}, "adjusted must be an integer K"),
    ({"adjusted": (99,)}, "adjusted stage 99 is not in 0.."),
    ({"adjusted": (True,)}, "adjusted stage True is not in 0.."),
    ({"recompute": ()}, "recompute must be a non-empty tuple"),
    ({"recompute": ""}, "recompute must be a non-empty tuple"),
    ({"recompute": (1,)}, "recompute must be a non-empty tuple"),
    ({"recompute": None}, "recompute must be a non-empty tuple"),
    ({"swap_fraction": -0.1}, "swap fraction must be a number in [0, 1]"),
    ({"swap_fraction": 1.5}, "swap fraction must be a number in [0, 1]"),
    ({"swap_fraction": math.nan}, "swap fraction must be a number in [0, 1]"),
    ({"swap_blocks": -1}, "swap_blocks"),
    ({"swap_blocks": True}, "swap_blocks"),
]
BAD_WARMUP = [(True, 1), (0, 1), (2,), (3, 3, 3), 3, 2.5, ("a", 1)]
BAD_VIRTUAL = [0, -1, True, 1.5]
GOOD = [{}, {"adjusted": (0,)}, {"adjusted": "all"}, {"adjusted": "none"}, {"adjusted": 0},
        {"recompute": "full"}, {"recompute": ("full",)}]


def _takes(name: str, arg: str) -> bool:
    return arg in inspect.signature(SCHEDULES[name]).parameters


def _call(name: str, **kw):
    args = {"num_stages": P, "num_microbatches": M, **kw}
    return SCHEDULES[name](args.pop("num_stages"), args.pop("num_microbatches"), **args)


@pytest.mark.parametrize("kw, message", BAD, ids=[repr(kw) for kw, _ in BAD])
def test_every_generator_refuses_the_same_bad_argument_alike(kw, message):
    for name in SCHEDULES:
        with pytest.raises(ScheduleError, match=re.escape(message)):
            _call(name, **kw)


@pytest.mark.parametrize("warmup", BAD_WARMUP, ids=repr)
def test_every_generator_with_a_warmup_refuses_a_bad_one_alike(warmup):
    takers = [name for name in SCHEDULES if _takes(name, "warmup")]
    assert {"1f1b", "recomp", "obscura", "zb-h1-capped", "obscura-zb-h1"} <= set(takers)
    for name in takers:
        with pytest.raises(ScheduleError, match=f"warmup must hold {P} integers >= 1, got "):
            _call(name, warmup=warmup)


@pytest.mark.parametrize("virtual", BAD_VIRTUAL, ids=repr)
def test_every_chunked_generator_refuses_bad_virtual_stages_alike(virtual):
    takers = [name for name in SCHEDULES if _takes(name, "virtual_stages")]
    assert len(takers) == 5
    for name in takers:
        with pytest.raises(ScheduleError, match="virtual stages must be an integer >= 1"):
            _call(name, virtual_stages=virtual)


@pytest.mark.parametrize("kw", GOOD, ids=repr)
def test_every_generator_takes_the_same_good_argument(kw):
    for name in SCHEDULES:
        assert _call(name, **kw).num_microbatches == M


def test_a_good_warmup_is_taken_by_every_generator_with_one():
    for name in SCHEDULES:
        if _takes(name, "warmup"):
            assert _call(name, warmup=(3, 3)).num_microbatches == M
            assert _call(name, warmup=[4, 4]).num_microbatches == M


def test_setup_is_the_preamble():
    st = setup(2, 4, None, "full", stages_per_device=3, warmup=[2, 1], adjusted_default="all")
    assert (st.num_devices, st.num_microbatches, st.num_stages) == (2, 4, 6)
    assert st.adjusted == tuple(range(6)) and st.recompute == ("full",) and st.warmup == (2, 1)
    assert setup(2, 4, None, ("full",)).adjusted == () and setup(2, 4, None, ("full",)).warmup is None
