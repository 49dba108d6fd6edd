"""Token data for training: deterministic batches by (seed, step), so a resumed
run sees exactly the batches an uninterrupted one would.

Sources (the `--data` flag):
  synthetic  uniform random tokens over the model's vocabulary (the paper's setting)
  stdlib     byte-level tokens (vocab 256) of this Python's own standard-library .py
             files, in sorted path order: real text on every machine, no download
  PATH       a token file: .npy (1-D integers) or a raw uint16/uint32 memmap
"""
from __future__ import annotations

import sysconfig
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from obscura_jax.errors import RunError

RAW_DTYPES = {"uint16": np.uint16, "uint32": np.uint32}
BYTE_VOCAB = 256


@dataclass(frozen=True)
class BatchShape:
    microbatches: int
    micro_batch_size: int
    seq_len: int

    def __post_init__(self) -> None:
        for name in ("microbatches", "micro_batch_size", "seq_len"):
            if getattr(self, name) < 1:
                raise RunError(f"{name.replace('_', ' ')} must be >= 1, got {getattr(self, name)}")

    @property
    def rows(self) -> int:
        return self.microbatches * self.micro_batch_size

    @property
    def tokens_per_step(self) -> int:
        return self.rows * self.seq_len


def stdlib_sources() -> list[Path]:
    """The standard library's .py files in deterministic order (no third-party packages)."""
    root = Path(sysconfig.get_paths()["stdlib"])
    files = [p for p in root.rglob("*.py")
             if not {"site-packages", "dist-packages"} & set(p.relative_to(root).parts)]
    return sorted(files, key=lambda p: p.relative_to(root).as_posix())


def load_stdlib_bytes() -> np.ndarray:
    chunks = []
    for path in stdlib_sources():
        try:
            chunks.append(path.read_bytes())
        except OSError:  # unreadable file: skip, the order of the rest is unchanged
            continue
    if not chunks:
        raise RunError(f"no Python source files found under {sysconfig.get_paths()['stdlib']}")
    return np.frombuffer(b"\n".join(chunks), dtype=np.uint8)


def load_token_file(path: str, dtype: str | None = None) -> np.ndarray:
    p = Path(path)
    if not p.is_file():
        raise RunError(f"data file not found: {path}")
    if p.suffix == ".npy":
        try:
            arr = np.load(p, mmap_mode="r", allow_pickle=False)
        except (ValueError, OSError) as e:
            raise RunError(f"cannot read token file {path}: {e}") from None
        if arr.ndim != 1 or not np.issubdtype(arr.dtype, np.integer):
            raise RunError(f"token file {path} must hold a 1-D integer array, got {arr.dtype} {arr.shape}")
        if arr.size == 0:
            raise RunError(f"token file {path} is empty")
        return arr
    name = dtype or "uint16"
    if name not in RAW_DTYPES:
        raise RunError(f"--dtype must be one of {', '.join(RAW_DTYPES)}, got {name!r}")
    itemsize = np.dtype(RAW_DTYPES[name]).itemsize
    if p.stat().st_size % itemsize:
        raise RunError(f"token file {path} is {p.stat().st_size} bytes, not a multiple of {name}")
    if p.stat().st_size == 0:
        raise RunError(f"token file {path} is empty")
    return np.memmap(p, dtype=RAW_DTYPES[name], mode="r")


class TokenData:
    """Deterministic (tokens, targets) batches: int32 [microbatches * b, seq_len] each,
    targets being the next token."""

    def __init__(self, name: str, vocab_size: int, corpus: np.ndarray | None, seed: int):
        self.name = name
        self.vocab_size = int(vocab_size)
        self.corpus = corpus
        self.seed = int(seed)

    def batch(self, step: int, shape: BatchShape) -> tuple[np.ndarray, np.ndarray]:
        rng = np.random.default_rng([self.seed, int(step)])
        if self.corpus is None:
            window = rng.integers(0, self.vocab_size, (shape.rows, shape.seq_len + 1), dtype=np.int64)
        else:
            n = len(self.corpus)
            if n < shape.seq_len + 1:
                raise RunError(f"data {self.name} has {n} tokens, fewer than seq_len + 1 = {shape.seq_len + 1}")
            starts = rng.integers(0, n - shape.seq_len, shape.rows)
            window = np.stack([np.asarray(self.corpus[s:s + shape.seq_len + 1], dtype=np.int64)
                               for s in starts])
            top = int(window.max())
            if top >= self.vocab_size:
                raise RunError(f"data {self.name} holds token id {top} >= the model's vocabulary {self.vocab_size}")
        window = window.astype(np.int32)
        return window[:, :-1], window[:, 1:]

    def microbatches(self, step: int, shape: BatchShape) -> tuple[np.ndarray, np.ndarray]:
        """-> tokens, targets as [m, b, T]."""
        tokens, targets = self.batch(step, shape)
        m, b, t = shape.microbatches, shape.micro_batch_size, shape.seq_len
        return tokens.reshape(m, b, t), targets.reshape(m, b, t)


def open_data(spec: str, *, model_vocab: int, seed: int, dtype: str | None = None) -> TokenData:
    """'synthetic' | 'stdlib' | a token file path -> TokenData (one-line ValueError on bad input)."""
    if spec == "synthetic":
        return TokenData("synthetic", model_vocab, None, seed)
    if spec == "stdlib":
        if model_vocab < BYTE_VOCAB:
            raise RunError(f"stdlib data needs a vocabulary of >= {BYTE_VOCAB} byte tokens, the model has {model_vocab}")
        return TokenData("stdlib", model_vocab, load_stdlib_bytes(), seed)
    corpus = load_token_file(spec, dtype)
    low, top = int(corpus.min()), int(corpus.max())   # once, before any step: a bad id never reaches a step
    if low < 0:
        raise RunError(f"data file {spec} holds a negative token id ({low}); ids run 0..{model_vocab - 1}")
    if top >= model_vocab:
        raise RunError(f"data file {spec} holds token id {top} >= the model's vocabulary {model_vocab}")
    return TokenData(spec, model_vocab, corpus, seed)
