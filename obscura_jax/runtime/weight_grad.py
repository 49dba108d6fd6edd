"""How a split backward's W gets what it reads (docs/cli.md: --weight-grad,
--head-weight-grad; the cut itself: obscura_jax/runtime/backward_split.py).

- `mode` "hold": I hands W each weight matmul's input (kept by the forward or
  recomputed once in I) and output cotangent; W runs only the weight matmuls.
- `mode` "rederive": W holds the output cotangents and each unit's input (a
  residual under every policy) and recomputes the matmuls' inputs (norm outputs, the
  attention output, the MLP's gated product) itself: less held between I and W, a
  longer W.
- `head` "auto": the head's weight gradient is computed at once, inside I (W holds
  nothing for it), when planner.analytic.head_weight_grad_at_once says its W holds
  more bytes per FLOP than a transformer layer's; "defer" never, "at-once" always.
  The rule depends on the model's shapes only, so a profile of the head unit records
  the I, W and held bytes of what a run of that model does.
"""
from __future__ import annotations

from dataclasses import dataclass

import models

WEIGHT_GRAD_MODES = ("hold", "rederive")
HEAD_WEIGHT_GRAD = ("auto", "defer", "at-once")


@dataclass(frozen=True)
class WeightGrad:
    mode: str = "hold"
    head: str = "auto"

    def __post_init__(self) -> None:
        if self.mode not in WEIGHT_GRAD_MODES:
            raise ValueError(f"weight-grad mode must be one of {', '.join(WEIGHT_GRAD_MODES)}, got {self.mode!r}")
        if self.head not in HEAD_WEIGHT_GRAD:
            raise ValueError(f"head weight-grad must be one of {', '.join(HEAD_WEIGHT_GRAD)}, got {self.head!r}")

    def at_once_units(self, cfg, unit_range, seq_len: int, micro_batch: int) -> frozenset[str]:
        """Units of the stage over `unit_range` whose weight gradients I computes."""
        if unit_range[1] != cfg.num_units or self.head == "defer":
            return frozenset()
        from planner.analytic import head_weight_grad_at_once  # lazy: loads JAX and optax; RunConfig imports this module
        if self.head == "at-once" or head_weight_grad_at_once(cfg, seq_len, micro_batch):
            return frozenset({models.unit_names(cfg)[-1]})
        return frozenset()

    def to_json(self) -> dict:
        return {"mode": self.mode, "head": self.head}
