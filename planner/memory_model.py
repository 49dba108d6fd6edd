"""Per-stage memory M_s = W_s + A_s of the Obscura paper (docs/obscura.md, "Memory"),
for 1F1B, Recomp-N, the strawman and Obscura, in closed form: the paper's Eq. 1,
A_s = (mu_s - lambda_s) a_adj + (1 - beta) lambda_s a_adj, with mu_s the
micro-batches a schedule keeps in flight on stage s. The planner takes every stage
peak from the one accounting (schedules.memory, the fold over the per-kind table's
memory effects, on the simulated timeline: `StageStats.peak_held_bytes`); these
forms stay as the paper's equations, each held against that fold by
tests/planner/test_memory_model.py: equal without swapping and, counted over the
action order (schedules.memory.order_memory), with it; the simulator, which frees
a swapped block only when its SO ends, may see more. `warmup_1f1b` is also the
p - s of the paper's Step 1 rule in planner.identify (which stages must recompute
at all). The planner adds the rematerialisation working set
(`planner.costs.working_bytes`) on top.
"""
from __future__ import annotations

from typing import Sequence

from schedules.costs import StageCosts


def warmup_1f1b(p: int, m: int, s: int) -> int:
    """Micro-batches stage s holds at most in 1F1B (DAPPLE): p - s."""
    return min(p - s, m)


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
