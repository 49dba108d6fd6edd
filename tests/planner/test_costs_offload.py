"""planner.costs' kept bytes with an offload set: the offloaded ops' bytes are host
bytes, not device bytes, in every kept-bytes figure (the helpers' and a profile
that `obscura plan --offload` searches on); an op a stage recomputes is kept nowhere."""
import pytest

from planner.costs import host_kept_bytes, kept_bytes, offload_profile, stage_costs
from planner.profile import FULL, LAYER
from tests.planner.synthetic import MB, synthetic_profile

PROF = synthetic_profile(num_layers=4)
OFF = frozenset({"mlp_gate", "mlp_up"})
LAYER_UNITS = (1, 3)          # one attention and one MLP unit


@pytest.mark.parametrize("recompute, host", [((), 5.4 * MB), (("mlp_gate",), 2.7 * MB), (("mlp_act",), 5.4 * MB),
                                              ((FULL,), 0.0), ((LAYER,), 0.0)])
def test_offloaded_ops_are_host_bytes_unless_recomputed(recompute, host):
    assert host_kept_bytes(PROF, LAYER_UNITS, recompute, OFF) == pytest.approx(host)
    if LAYER not in recompute:
        assert kept_bytes(PROF, LAYER_UNITS, recompute, offload=OFF) == pytest.approx(
            kept_bytes(PROF, LAYER_UNITS, recompute) - host)


def test_the_traced_figure_drops_the_host_bytes_too():
    traced = lambda kind, r: PROF.unit(kind).kept_bytes(r) + 1 * MB   # noqa: E731  a unit_kept one MiB above
    plain = kept_bytes(PROF, LAYER_UNITS, (), traced)
    assert kept_bytes(PROF, LAYER_UNITS, (), traced, offload=OFF) == pytest.approx(plain - 5.4 * MB)


@pytest.mark.parametrize("recompute", [(), ("mlp_gate",), ("mlp_act", "q"), (FULL,)])
def test_an_offloaded_profile_keeps_the_device_bytes(recompute):
    prof = offload_profile(PROF, OFF)
    for units in ((0, 3), (3, 7), (7, 10)):
        assert kept_bytes(prof, units, recompute) == pytest.approx(kept_bytes(PROF, units, recompute, offload=OFF))
    costs = stage_costs(prof, ((0, 5), (5, 10)), [recompute, ()])
    assert costs.act_bytes == pytest.approx(tuple(kept_bytes(PROF, u, (), offload=OFF) for u in ((0, 5), (5, 10))))
    assert prof.unit("mlp").fwd_time == PROF.unit("mlp").fwd_time and prof.model == PROF.model
