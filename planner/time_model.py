"""The paper's iteration-time model in closed form (docs/obscura.md, sections 5-6: Eq. 2-3,
uneven Eq. 5-6). It is NOT the judge: the simulator (schedules.simulate) is. The
closed forms remain because they are fast and linear enough to define the recompute
IP's search space (planner.recompute.recompute_ip) and Algorithm 1's loop test
(planner.partition); every configuration they pick is then simulated.

Where it agrees with the simulator, and in which direction it errs otherwise
(tests/planner/test_time_model.py holds it to each):
- exact for uniform costs without swapping: 1F1B, Recomp-All, Obscura for every k;
- optimistic when stages communicate (p2p latency or bandwidth): it has no transfers;
- pessimistic on uneven stages for 1F1B and Recomp (one bottleneck step for all);
  Obscura's relaxed order there can land either side (0.93-1.45x in a random sample);
- pessimistic with swapping where blocks hide (a_adj beta <= (3f + r) B, Eq. 4).

Generalised to measured profiles where b != 2f: the paper's "3f" is one
micro-batch's forward + backward on a stage (f + b), "2f + r" is its backward
with recompute (b + r), and the eviction window is one forward (f). With b = 2f
these are the paper's formulas exactly. Communication is not modelled (the
paper's model has none); the simulator adds it and is the judge.

    C_adj = max_{s<=k} (f_s + b_s + r_s)        C_non = max_{s>k} (f_s + b_s + r_s)
    s > k:  T_s = C_non * (m + p - s - 1)
    s <= k: T_s = max(T_{s+1} + C_adj, C_adj * (m + k - s) + T_C(s))
    T_C(s) = max(lambda_s (a_s beta / B - f_s) - (k - s)(b_s + r_s), 0)
           + max(lambda_s (a_s beta / B - b_s - r_s), 0) + epsilon

Non-adjusted stages may still recompute (the CMB set); their r_s enters C_non.
Both T_C terms are clamped at zero: a transfer that hides under compute costs
nothing, it cannot make a stage faster (the restated Eq. 2 leaves the second term
unclamped, which would reward slow swaps). epsilon, the paper's
implementation-specific slack in [0, 3f + r], defaults to 0.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from schedules.costs import StageCosts


def step_costs(costs: StageCosts, k: int, recompute_stages: Sequence[int] | None = None
               ) -> tuple[float, float]:
    """(C_adj, C_non): the slowest per-micro-batch step among adjusted / other
    stages (Eq. 5-6). Stages in `recompute_stages` (default 0..k) pay r_s."""
    p = costs.num_stages
    rec = set(range(k + 1) if recompute_stages is None else recompute_stages)
    step = [costs.fwd[s] + costs.backward_time(s, s in rec) for s in range(p)]
    c_adj = max(step[: k + 1], default=0.0)
    c_non = max(step[k + 1:], default=0.0)
    return c_adj, c_non


def swap_stall(lam: int, kept: float, beta: float, host_bandwidth: float, fwd: float,
               bwd: float, recompute: float, k: int, s: int, epsilon: float = 0.0) -> float:
    """T_C(s), Eq. 2: eviction beyond what warm-up forwards and the stage's extra
    bubbles hide, plus loading beyond what cool-down backwards hide."""
    if lam == 0 or beta == 0:
        return 0.0
    per_block = kept * beta / host_bandwidth
    evict = max(lam * (per_block - fwd) - (k - s) * (bwd + recompute), 0.0)
    load = max(lam * (per_block - bwd - recompute), 0.0)
    return evict + load + epsilon


def swap_hides(kept: float, beta: float, host_bandwidth: float, fwd: float, bwd: float,
               recompute: float) -> bool:
    """Eq. 4's transfer constraint a_adj beta <= (3f + r) B: one block's
    eviction-loading fits under one steady forward + backward."""
    return kept * beta <= (fwd + bwd + recompute) * host_bandwidth * (1 + 1e-12)


def finish_times(p: int, m: int, k: int, c_adj: float, c_non: float,
                 stalls: Sequence[float] = ()) -> tuple[float, ...]:
    """T_s for every stage (Eq. 3 / Eq. 5-6). T_0 is the iteration time."""
    stall = tuple(stalls) or (0.0,) * p
    t = [0.0] * p
    for s in range(p - 1, k, -1):
        t[s] = c_non * (m + p - s - 1)
    for s in range(min(k, p - 1), -1, -1):
        after = t[s + 1] + c_adj if s + 1 < p else -math.inf
        t[s] = max(after, c_adj * (m + k - s) + stall[s])
    return tuple(t)


@dataclass(frozen=True)
class TimePrediction:
    finish: tuple[float, ...]  # T_s per stage
    c_adj: float
    c_non: float
    stalls: tuple[float, ...]
    last_adjusted: int = -1    # k

    @property
    def iteration_time(self) -> float:
        return self.finish[0]

    @property
    def adjusted_bottleneck(self) -> bool:
        """Algorithm 1's loop test T_k - C_adj > T_{k+1}: the adjusted stages, not
        the rest of the pipeline, set the pace."""
        k = self.last_adjusted
        if k < 0 or k + 1 >= len(self.finish):
            return False
        return self.finish[k] - self.c_adj > self.finish[k + 1] * (1 + 1e-12)


def predict_closed_form(costs: StageCosts, m: int, k: int, lambdas: Sequence[int] = (), beta: float = 0.0,
                        recompute_stages: Sequence[int] | None = None, epsilon: float = 0.0) -> TimePrediction:
    """Eq. 2-3 (5-6) on a StageCosts: adjusted stages 0..k recompute
    (act_bytes_recompute, recompute), `lambdas[s]` blocks swapped at fraction beta."""
    p = costs.num_stages
    rec = set(range(k + 1) if recompute_stages is None else recompute_stages)
    c_adj, c_non = step_costs(costs, k, rec)
    lam = tuple(lambdas) or (0,) * p
    stalls = tuple(
        swap_stall(lam[s], costs.kept_bytes(s, True), beta, costs.host_bandwidth, costs.fwd[s],
                   costs.bwd[s], costs.recompute[s], k, s, epsilon) if s <= k else 0.0
        for s in range(p))
    return TimePrediction(finish_times(p, m, k, c_adj, c_non, stalls), c_adj, c_non, stalls, k)
