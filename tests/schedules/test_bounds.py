"""schedules.bounds: the pipeline bounds, one line each (and still importable from
schedules.generators)."""
import pytest

from schedules import ScheduleError
from schedules import generators
from schedules.bounds import (MAX_ACTIONS, MAX_MICROBATCHES, MAX_PAIRS, MAX_STAGES, check_action_count,
                              check_index, check_pipeline_size)


def test_generators_re_export_the_bounds():
    assert (generators.MAX_STAGES, generators.MAX_MICROBATCHES, generators.MAX_PAIRS) == \
        (MAX_STAGES, MAX_MICROBATCHES, MAX_PAIRS)
    assert generators.check_pipeline_size is check_pipeline_size


@pytest.mark.parametrize("p,m,needle", [
    (MAX_STAGES + 1, 1, f"number of stages must be <= {MAX_STAGES}, got {MAX_STAGES + 1}"),
    (1, 10 ** 12, f"number of micro-batches must be <= {MAX_MICROBATCHES}, got 1000000000000"),
    (512, 512, f"stages x micro-batches must be <= {MAX_PAIRS}, got 512 x 512"),
])
def test_check_pipeline_size(p, m, needle):
    with pytest.raises(ScheduleError, match=needle):
        check_pipeline_size(p, m)


def test_in_bounds_and_non_integers_pass():
    check_pipeline_size(MAX_STAGES, MAX_PAIRS // MAX_STAGES)
    check_pipeline_size("x", None)     # the caller's own type checks answer
    check_index("stage", MAX_STAGES - 1)
    check_index("micro-batch", MAX_MICROBATCHES - 1)
    check_action_count(MAX_ACTIONS)


def test_indices_and_action_counts():
    with pytest.raises(ScheduleError, match="stage index 1024 is past this tool's bound \\(at most 1024 stages\\)"):
        check_index("stage", MAX_STAGES)
    with pytest.raises(ScheduleError, match="x: device index 1000000000 is past"):
        check_index("device", 10 ** 9, "x: ")
    with pytest.raises(ScheduleError, match="micro-batches\\)$"):
        check_index("micro-batch", MAX_MICROBATCHES)
    with pytest.raises(ScheduleError, match=f"{MAX_ACTIONS + 1} actions; at most {MAX_ACTIONS} are read"):
        check_action_count(MAX_ACTIONS + 1)
