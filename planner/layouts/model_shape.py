"""What the sweep needs to know about a model: its shape, exact parameter counts
per unit kind (from the models package, abstractly: nothing is allocated), and the
MFU convention's model FLOPs per token.

MFU convention (spec/layouts.md): flops_per_token = 6·N + 12·L·H·Q·T, H heads, Q
head dim, T sequence length; recompute is not counted. N is the project's one
definition (models.info.flops_params): every parameter except the input embedding
tables; the output projection counts, its matmul being real work. (Counting it as
an embedding instead would lower 13B MFU figures by 1.3% of themselves.)
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def model_config(name: str):
    """A registered model config by name (the layouts paper's 30B is "llama-30b").
    Unknown names -> one-line ValueError."""
    import models
    if name in models.CONFIGS:
        return models.get_config(name)
    raise ValueError(f"unknown model {name!r}; valid models: {', '.join(models.CONFIGS)}")


@dataclass(frozen=True)
class ModelShape:
    name: str
    family: str
    hidden: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    ffn_hidden: int
    vocab_size: int
    tie_embeddings: bool
    compute_bytes: int          # bytes per activation element
    attn_params: int            # per attention unit (norm included)
    mlp_params: int
    embed_params: int
    head_params: int            # final norm + output projection (0 projection when tied)
    flops_params: int           # N of the MFU formula (models.info.flops_params)

    @classmethod
    def from_config(cls, cfg) -> "ModelShape":
        from models.info import flops_params
        from models.units import unit_param_count
        return cls(name=cfg.name, family=cfg.family, hidden=cfg.hidden,
                   num_layers=cfg.num_layers, num_heads=cfg.num_heads,
                   num_kv_heads=cfg.num_kv_heads, ffn_hidden=cfg.ffn_hidden,
                   vocab_size=cfg.vocab_size, tie_embeddings=cfg.tie_embeddings,
                   compute_bytes=int(np.dtype(_np_dtype(cfg.compute_dtype)).itemsize),
                   attn_params=unit_param_count(cfg, "attn"),
                   mlp_params=unit_param_count(cfg, "mlp"),
                   embed_params=unit_param_count(cfg, "embed"),
                   head_params=unit_param_count(cfg, "head"),
                   flops_params=flops_params(cfg))

    @property
    def head_dim(self) -> int:
        return self.hidden // self.num_heads

    @property
    def num_units(self) -> int:
        return 2 * self.num_layers + 2

    @property
    def total_params(self) -> int:
        return (self.embed_params + self.head_params
                + self.num_layers * (self.attn_params + self.mlp_params))

    def flops_per_token(self, seq_len: int) -> float:
        return (6.0 * self.flops_params
                + 12.0 * self.num_layers * self.num_heads * self.head_dim * seq_len)

    def layer_key(self) -> dict:
        """What identifies one transformer layer's cost in a measurement file."""
        return {"family": self.family, "hidden": self.hidden, "num_heads": self.num_heads,
                "num_kv_heads": self.num_kv_heads, "ffn_hidden": self.ffn_hidden,
                "compute_bytes": self.compute_bytes}


def _np_dtype(name: str):
    return np.float32 if name == "float32" else np.float16  # bf16 and fp16 are both 2 bytes
