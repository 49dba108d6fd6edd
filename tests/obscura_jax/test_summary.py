"""The run summary (obscura_jax.summary): the in-run swap overlap. (The summary of
a real run: test_trainer.py.)"""
import pytest

from obscura_jax.summary import swap_overlap
from schedules.ir import Action, Kind
from schedules.timeline import OpRecord, Timeline


def testswap_overlap_is_the_share_of_copy_time_under_compute():
    class Dev:
        def __init__(self, i):
            self.id = i
    f, so, si = Action(0, Kind.F, 0), Action(0, Kind.SO, 0), Action(0, Kind.SI, 0)
    ops = [OpRecord.of(f, 0.0, 2.0), OpRecord.of(so, 1.0, 3.0), OpRecord.of(si, 5.0, 6.0)]
    tl = Timeline.from_ops(1, ops)
    # SO: 1 of its 2 seconds under F; SI: none of its second
    assert swap_overlap(tl, [Dev(0)]) == pytest.approx(1.0 / 3.0)
    assert swap_overlap(Timeline.from_ops(1, ops[:1]), [Dev(0)]) is None
