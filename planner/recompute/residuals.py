"""Exact kept bytes for any recompute set, when the profile's model is known.

The profile's per-op bytes are additive: kept(R) = input + sum(act of ops not in
R). That is exact for R = {} and R = full, but not for every set: JAX keeps what
the backward needs, so e.g. recomputing q alone frees nothing while q_rope is
saved (rope's backward never reads q). An additive model can be exact at both ends
or safe for every set, not both. So for a registered model the planner checks
each chosen set against the residuals `jax.vjp` really keeps (models.info traces
them on abstract shapes: no weights allocated, ~50 ms a set) and uses the larger
figure; memory is then never under-predicted. Profiles of unknown models (other
tools) get the additive figure.
"""
from __future__ import annotations

from functools import lru_cache
from typing import Callable

import models
from models.errors import ObscuraError
from planner.profile import FULL, Profile

UnitKept = Callable[[str, frozenset], float]


@lru_cache(maxsize=64)
def exact_unit_kept(profile: Profile) -> UnitKept | None:
    """(kind, R) -> traced kept bytes of one unit, or None when the profile's
    model is not registered or its bytes do not match the traced model (then the
    trace describes some other shape and cannot check this profile)."""
    try:
        cfg = models.get_config(profile.model)
        if profile.seq_len > cfg.max_seq_len:
            return None
        cfg = cfg.replace(attention_impl="xla")  # same named residuals, traceable anywhere
        seq, mb = profile.seq_len, profile.micro_batch

        import models.info as info  # lazy: tracing starts JAX, which planning without a model never needs

        @lru_cache(maxsize=None)
        def traced(kind: str, ops: frozenset) -> float:
            return float(info.unit_residual_bytes(cfg, kind, sorted(ops) if ops else "none", seq, mb))

        for kind in profile.layout:
            unit = profile.unit(kind)
            if not _close(traced(kind, frozenset()), unit.kept_bytes(())) or \
                    not _close(traced(kind, frozenset(models.unit_ops(cfg.family, kind))), unit.input_bytes):
                return None
    except ObscuraError:  # unknown model, unsupported shape: nothing to check against
        return None

    @lru_cache(maxsize=None)
    def kept(kind: str, recompute: frozenset) -> float:
        own = frozenset(models.unit_ops(profile.family, kind))
        ops = own if FULL in recompute else frozenset(recompute) & own
        return traced(kind, ops)

    return kept


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-6 * max(abs(a), abs(b), 1.0)


@lru_cache(maxsize=64)
def marginal_op_bytes(profile: Profile) -> dict[str, tuple[float, dict[str, float]]] | None:
    """Per unit kind: (bytes kept whatever single op is recomputed, {op: bytes that
    recomputing that op ALONE frees}), traced; None without a traceable model.

    The recompute IP counts these: kept(R) = base + sum(freed of ops not in R)
    then equals the traced figure at R = {} and for every single op, and is safe
    whenever freeing is super-additive (recomputing ops together frees at least
    what each frees alone, as for q with q_rope). The residual check after the IP
    catches any set where it is not."""
    kept = exact_unit_kept(profile)
    if kept is None:
        return None
    out = {}
    for kind in profile.layout:
        unit = profile.unit(kind)
        none = kept(kind, frozenset())
        freed = {op: max(0.0, none - kept(kind, frozenset({op}))) for op in unit.op_names}
        out[kind] = (none - sum(freed.values()), freed)
    return out
