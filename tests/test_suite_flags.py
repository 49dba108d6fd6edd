"""The suite's XLA_FLAGS (tests/conftest.py): the loop-emitter flag is added only
where this XLA knows it, since XLA aborts a process on a flag it does not know (the
GPU machine's jax 0.11.2 did, results/h200/engine_v6/flagcheck.txt)."""
import pytest

from tests import conftest


def test_a_flag_this_xla_does_not_know_is_left_out(monkeypatch):
    monkeypatch.setattr(conftest, "LOOP_EMITTERS", "--xla_no_such_flag_for_obscura=true")
    flags = conftest._suite_xla_flags()
    assert flags == "--xla_force_host_platform_device_count=8 --xla_backend_optimization_level=0"


def test_a_flag_it_knows_is_kept():
    # this box's jax 0.10 knows the loop emitters (the flag is kept there: CI's speed)
    import jax
    if tuple(int(v) for v in jax.__version__.split(".")[:2]) >= (0, 11):
        pytest.skip("jax 0.11's XLA has no loop-emitter flag")
    assert conftest._suite_xla_flags().endswith(" --xla_cpu_use_fusion_emitters=false")
