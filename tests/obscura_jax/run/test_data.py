import numpy as np
import pytest

from obscura_jax.run.data import BatchShape, load_stdlib_bytes, open_data, stdlib_sources

SHAPE = BatchShape(microbatches=4, micro_batch_size=2, seq_len=16)


def test_synthetic_is_deterministic_by_seed_and_step():
    a = open_data("synthetic", model_vocab=100, seed=3)
    b = open_data("synthetic", model_vocab=100, seed=3)
    t1, y1 = a.batch(5, SHAPE)
    t2, y2 = b.batch(5, SHAPE)
    np.testing.assert_array_equal(t1, t2)
    assert not np.array_equal(t1, a.batch(6, SHAPE)[0])
    assert not np.array_equal(t1, open_data("synthetic", model_vocab=100, seed=4).batch(5, SHAPE)[0])
    assert t1.shape == (8, 16) and t1.dtype == np.int32 and t1.max() < 100
    np.testing.assert_array_equal(t1[:, 1:], y1[:, :-1])  # targets are the next tokens
    tok, tgt = a.microbatches(5, SHAPE)
    assert tok.shape == (4, 2, 16)
    np.testing.assert_array_equal(tok.reshape(8, 16), t1)


def test_stdlib_is_byte_text_in_sorted_order():
    files = stdlib_sources()
    assert len(files) > 100
    assert not any("site-packages" in f.parts for f in files)
    data = load_stdlib_bytes()
    assert data.dtype == np.uint8 and len(data) > 1_000_000
    assert data[: len(files[0].read_bytes())].tobytes() == files[0].read_bytes()
    d = open_data("stdlib", model_vocab=256, seed=0)
    tok, tgt = d.batch(0, SHAPE)
    assert tok.max() < 256
    text = bytes(tok[0].astype(np.uint8))
    assert sum(32 <= c < 127 or c in (9, 10) for c in text) >= 0.9 * len(text)  # mostly ASCII source
    np.testing.assert_array_equal(tok, open_data("stdlib", model_vocab=256, seed=0).batch(0, SHAPE)[0])


def test_stdlib_needs_byte_vocab():
    with pytest.raises(ValueError, match="256"):
        open_data("stdlib", model_vocab=100, seed=0)


def test_token_files(tmp_path):
    arr = np.arange(1000, dtype=np.uint32) % 50
    np.save(tmp_path / "tok.npy", arr)
    arr.astype(np.uint16).tofile(tmp_path / "tok16.bin")
    arr.tofile(tmp_path / "tok32.bin")
    a = open_data(str(tmp_path / "tok.npy"), model_vocab=50, seed=1).batch(2, SHAPE)
    b = open_data(str(tmp_path / "tok16.bin"), model_vocab=50, seed=1).batch(2, SHAPE)
    c = open_data(str(tmp_path / "tok32.bin"), model_vocab=50, seed=1, dtype="uint32").batch(2, SHAPE)
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[0], c[0])
    # Windows are contiguous runs of the file (which counts up modulo 50).
    for row, nxt in zip(a[0], a[1]):
        np.testing.assert_array_equal(row, (row[0] + np.arange(16)) % 50)
        assert nxt[-1] == (row[-1] + 1) % 50


def test_bad_token_files(tmp_path):
    with pytest.raises(ValueError, match="not found"):
        open_data(str(tmp_path / "missing.bin"), model_vocab=50, seed=0)
    (tmp_path / "odd.bin").write_bytes(b"\x00\x01\x02")
    with pytest.raises(ValueError, match="multiple"):
        open_data(str(tmp_path / "odd.bin"), model_vocab=50, seed=0)
    np.save(tmp_path / "big.npy", np.full(100, 70, np.int64))
    with pytest.raises(ValueError, match="vocabulary"):
        open_data(str(tmp_path / "big.npy"), model_vocab=50, seed=0).batch(0, SHAPE)
    np.save(tmp_path / "short.npy", np.zeros(5, np.int64))
    with pytest.raises(ValueError, match="fewer"):
        open_data(str(tmp_path / "short.npy"), model_vocab=50, seed=0).batch(0, SHAPE)
    np.save(tmp_path / "float.npy", np.zeros(100, np.float32))
    with pytest.raises(ValueError, match="integer"):
        open_data(str(tmp_path / "float.npy"), model_vocab=50, seed=0)


def test_batch_shape_validation():
    with pytest.raises(ValueError, match="seq len"):
        BatchShape(1, 1, 0)
