"""planner.identify: memory limits from people, and which stages must recompute."""
import pytest

import models
from planner.errors import PlanError
from planner.identify import cmb_set, identify, parse_memory_limit, stage_peak_1f1b
from tests.planner.synthetic import synthetic_profile


@pytest.mark.parametrize("text, want", [
    ("80GiB", 80 * 2 ** 30), ("85.9GB", 85_900_000_000), ("512MiB", 512 * 2 ** 20), ("1e9", 10 ** 9),
    ("123", 123), (4096, 4096), (2.5e3, 2500), ("1.5 kib", 1536), ("2TB", 2 * 10 ** 12)])
def test_parse_memory_limit(text, want):
    assert parse_memory_limit(text) == want


@pytest.mark.parametrize("bad", ["", "lots", "80 GiBs", "-5GB", "0", 0, True, "GB"])
def test_parse_memory_limit_rejects_garbage(bad):
    with pytest.raises(PlanError, match="memory limit"):
        parse_memory_limit(bad)


def test_identify_is_a_prefix_and_cmb_shrinks_it():
    prof = synthetic_profile(num_layers=8)
    part = tuple(models.even_partition(prof.num_units, 4))
    peaks = [stage_peak_1f1b(prof, r, s, 4, 8, frozenset()) for s, r in enumerate(part)]
    cmb = cmb_set(prof)
    assert cmb == {"attn_norm", "mlp_norm", "mlp_act", "mlp_mul", "final_norm"}
    assert identify(prof, part, 8, max(peaks) + 1).last_adjusted == -1
    limit = (peaks[1] + peaks[2]) / 2  # stages 0 and 1 over it
    plain = identify(prof, part, 8, limit, cmb=False)
    assert plain.last_adjusted == 1 and plain.adjusted == (0, 1)
    with_cmb = identify(prof, part, 8, limit, cmb=True)
    assert with_cmb.last_adjusted < plain.last_adjusted
    cmb_stages = [s for s, r in enumerate(with_cmb.recompute) if r and s > with_cmb.last_adjusted]
    assert cmb_stages and all(with_cmb.recompute[s] == cmb for s in cmb_stages)
    for s in cmb_stages:
        assert stage_peak_1f1b(prof, part[s], s, 4, 8, cmb) <= limit
