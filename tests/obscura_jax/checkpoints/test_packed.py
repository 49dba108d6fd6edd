"""The multi-process checkpoint format (obscura_jax.checkpoints.packed): each device's
stages packed into one byte row and back, every dtype bit for bit. (Saving and
resuming across 4 processes, a save cut short by a kill, and refusing another process
count: test_watchdog.py.)"""
import jax
import jax.numpy as jnp
import numpy as np

from obscura_jax.checkpoints.packed import _packer, _unpack, row_layout


def trees():
    k = jax.random.split(jax.random.key(0), 3)
    params = {"w": jax.random.normal(k[0], (3, 5)), "b": jax.random.normal(k[1], (5,)).astype(jnp.bfloat16)}
    opt = ({"count": jnp.int32(7), "flag": jnp.array([True, False, True]),
            "mu": jax.random.normal(k[2], (2, 2, 2))}, jnp.uint8(200))
    return {3: (params, opt), 1: ({"e": jnp.arange(6, dtype=jnp.int32).reshape(2, 3)}, ())}


def test_layout_lists_every_leaf_in_stage_order_back_to_back():
    layout = row_layout(trees())
    assert [e[0] for e in layout] == [1] + [3] * 6
    offsets = [e[5] for e in layout]
    assert offsets == [0] + list(np.cumsum([e[6] for e in layout])[:-1])
    assert layout[0][3:5] == [[2, 3], "int32"] and layout[0][6] == 24


def test_pack_then_unpack_gives_every_leaf_back_bit_for_bit():
    t = trees()
    layout = row_layout(t)
    leaves = [leaf for s in sorted(t) for part in t[s] for leaf in jax.tree.leaves(part)]
    used = sum(e[6] for e in layout)
    row = _packer(used + 13, used)(leaves)                 # padded like a shorter device's row
    assert row.shape == (1, used + 13) and row.dtype == jnp.uint8
    back = _unpack(row, layout)
    assert len(back) == len(leaves)
    for a, b in zip(back, leaves):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
