import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from obscura_jax.runtime.stage_program import Residuals
from obscura_jax.runtime.swap import HostSwap, choose_leaves, host_memory_supported
from tests.budget import examples


@settings(max_examples=examples(200), deadline=None)
@given(st.lists(st.integers(0, 10_000), min_size=0, max_size=12), st.floats(0.0, 1.0))
def test_choose_leaves_takes_largest_whole_leaves_until_fraction(sizes, fraction):
    chosen = choose_leaves(tuple(sizes), fraction)
    total = sum(sizes)
    moved = sum(sizes[i] for i in chosen)
    assert len(set(chosen)) == len(chosen)
    if fraction == 0 or total == 0:
        assert chosen == ()
        return
    assert moved >= fraction * total - 1e-9
    # Largest first: nothing left behind is bigger than something taken.
    rest = [sizes[i] for i in range(len(sizes)) if i not in chosen]
    assert not rest or not chosen or max(rest) <= min(sizes[i] for i in chosen)
    # Minimal: without the last (smallest) leaf taken, the target would not be met.
    smallest = min(sizes[i] for i in chosen)
    assert moved - smallest < fraction * total or smallest == 0


def test_choose_leaves_rejects_bad_fraction():
    with pytest.raises(ValueError):
        choose_leaves((1, 2), 1.5)


@pytest.mark.parametrize("mechanism", ["device_put", "jit"])
def test_swap_round_trip_moves_to_pinned_host_and_back(mechanism):
    dev = jax.devices()[1]
    assert host_memory_supported(dev)
    leaves = tuple(jax.device_put(jnp.arange(n, dtype=jnp.float32), dev) for n in (100, 10, 1000, 1))
    res = Residuals(leaves, tuple(int(x.nbytes) for x in leaves))
    swap = HostSwap(mechanism)
    out = swap.swap_out(res, 0.5, dev)
    assert out.host_slots == (2,)  # the 1000-element leaf alone is >= half of the bytes
    assert out.leaves[2].sharding.memory_kind == "pinned_host"
    assert out.device_bytes == res.nbytes - 4000
    back = swap.swap_in(out, dev)
    assert back.host_slots == ()
    assert back.leaves[2].sharding.memory_kind == "device"
    assert all(b.devices() == {dev} for b in back.leaves)
    for a, b in zip(res.leaves, back.leaves):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert swap.counters.bytes_out == swap.counters.bytes_in == 4000


def test_unknown_mechanism():
    with pytest.raises(ValueError, match="mechanism"):
        HostSwap("dma")
