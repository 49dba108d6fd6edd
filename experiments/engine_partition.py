"""The partition the engine bench runs ZB-V on beside its even one: balanced for
memory by the planner (planner.families.balanced_partition) on the bench model's
analytic profile (exact bytes, roofline times), down to 1F1B's largest peak on the
even partition, so ZB-V's device 0 does not hold the embedding, the head and two
chunks' worth of layers at once."""
from __future__ import annotations

import models
from planner.analytic import analytic_profile
from planner.families import BY_NAME, balanced_partition


def zb_v_balanced_counts(model: str, layers: int | None, seq_len: int, microbatches: int, stages: int,
                         compute_dtype: str | None) -> str:
    """`--partition` for the bench's ZB-V: units per model stage, comma-separated."""
    overrides = {k: v for k, v in (("num_layers", layers), ("compute_dtype", compute_dtype)) if v is not None}
    cfg = models.get_config(model, **overrides)
    found = balanced_partition(analytic_profile(cfg, seq_len, 1, "H200"), BY_NAME["zb-v"], stages, microbatches)
    return ",".join(str(b - a) for a, b in found.partition)
