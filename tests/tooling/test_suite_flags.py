"""The suite's XLA_FLAGS (tests/conftest.py): each optional flag is added only where
this XLA knows it, since XLA aborts a process on a flag it does not know (the GPU
machine's jax 0.11.2 did on the loop-emitter flag, results/h200/engine_v6/flagcheck.txt)."""
import pytest

from tests import conftest


def test_a_flag_this_xla_does_not_know_is_left_out_and_the_others_kept(monkeypatch):
    known = next((f for f in conftest.OPTIONAL_FLAGS if conftest._xla_knows(f)), None)
    if known is None:
        pytest.skip("this XLA knows none of the optional flags")
    monkeypatch.setattr(conftest, "OPTIONAL_FLAGS", ("--xla_no_such_flag_for_obscura=true", known))
    assert conftest._suite_xla_flags() == f"{conftest.BASE_FLAGS} {known}"
    monkeypatch.setattr(conftest, "OPTIONAL_FLAGS", ("--xla_no_such_flag_for_obscura=true",))
    assert conftest._suite_xla_flags() == conftest.BASE_FLAGS


def test_the_flags_it_knows_are_kept():
    # this machine's jax 0.10 knows both (kept there: CI's speed)
    import jax
    if tuple(int(v) for v in jax.__version__.split(".")[:2]) >= (0, 11):
        pytest.skip("jax 0.11's XLA has no loop-emitter flag")
    assert conftest._suite_xla_flags() == " ".join([conftest.BASE_FLAGS, *conftest.OPTIONAL_FLAGS])
