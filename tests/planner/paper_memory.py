"""The Obscura paper's Eq. 1 in closed form, the test oracle of the one memory fold
(schedules.memory): per-stage memory M_s = W_s + A_s for 1F1B, Recomp-N, the strawman
and Obscura, A_s = (mu_s - lambda_s) a_adj + (1 - beta) lambda_s a_adj, with mu_s
the micro-batches a schedule keeps in flight on stage s (docs/obscura.md, section 5).
test_memory_model.py holds the fold to it: equal without swapping and, counted over
the action order (schedules.memory.order_memory), with it; the simulator, which
frees a swapped block only when its SO ends, may see more. The planner reads the
fold, and 1F1B's p - s (planner.identify.warmup_1f1b) for its Step 1.
"""
from __future__ import annotations

from typing import Sequence

from planner.identify import warmup_1f1b
from schedules.costs import StageCosts


def warmup_strawman(p: int, m: int, k: int, s: int) -> int:
    """Strawman: adjusted stages fill their 2(p-s-1) forward bubbles with forwards,
    3(p-s-1)+1 before the first backward."""
    return min(m, 3 * (p - s - 1) + 1) if s <= k else warmup_1f1b(p, m, s)


def warmup_obscura(p: int, m: int, k: int, s: int) -> int:
    """Obscura with migration optimisation: every adjusted stage migrates only as
    many forwards as the last adjusted stage k can use, 2(p-k-1)."""
    return min(m, (p - s) + 2 * (p - k - 1)) if s <= k else warmup_1f1b(p, m, s)


def eq1_resident_blocks(mu: int, lam: int, beta: float) -> float:
    """Eq. 1 divided by a_adj: (mu - lambda) + (1 - beta) lambda."""
    if not 0 <= lam <= mu:
        raise ValueError(f"swap blocks lambda={lam} must be in [0, mu={mu}]")
    return (mu - lam) + (1.0 - beta) * lam


# --- the paper's closed forms ------------------------------------------------

def peaks_1f1b(costs: StageCosts, m: int, recompute_stages: Sequence[int] = ()) -> tuple[float, ...]:
    """1F1B (DAPPLE); Recomp-N / DAPPLE+ when `recompute_stages` lists the stages
    that recompute (their micro-batches keep act_bytes_recompute)."""
    p = costs.num_stages
    adj = set(recompute_stages)
    return tuple(costs.weight_bytes[s] + warmup_1f1b(p, m, s) * costs.kept_bytes(s, s in adj)
                 for s in range(p))


def peaks_strawman(costs: StageCosts, m: int, k: int) -> tuple[float, ...]:
    p = costs.num_stages
    return tuple(costs.weight_bytes[s] + warmup_strawman(p, m, k, s) * costs.kept_bytes(s, s <= k)
                 for s in range(p))


def peaks_obscura(costs: StageCosts, m: int, k: int, lambdas: Sequence[int] = (),
                  beta: float = 0.0, recompute_stages: Sequence[int] | None = None) -> tuple[float, ...]:
    """Eq. 1 on adjusted stages 0..k; 1F1B (p - s) on the rest. Stages listed in
    `recompute_stages` (default 0..k) keep act_bytes_recompute (e.g. CMB stages
    after k)."""
    p = costs.num_stages
    lam = tuple(lambdas) or (0,) * p
    adj = set(range(k + 1) if recompute_stages is None else recompute_stages)
    out = []
    for s in range(p):
        mu = warmup_obscura(p, m, k, s)
        blocks = eq1_resident_blocks(mu, min(lam[s], mu), beta) if s <= k else mu
        out.append(costs.weight_bytes[s] + blocks * costs.kept_bytes(s, s in adj))
    return tuple(out)
