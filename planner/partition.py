"""Partition adjustment (docs/obscura.md, section 6: Algorithm 1).

Adjusted stages run slower (f + b + r per micro-batch) than the rest. While the
adjusted part sets the pace, T_k - C_adj > T_{k+1} (Eq. 5-6), move one unit from
the slowest adjusted stage (argmax f_s + b_s + r_s) to the fastest non-adjusted
stage (argmin f_s + b_s + r_s) that still fits in memory; the last move
overshoots (it made the non-adjusted part the bottleneck), so undo it.

Stages stay contiguous unit ranges: a move shifts every boundary between source
and destination by one unit (planner.costs.move_unit). After each move the
recompute IP is solved again for the new stages (memory changed) and the stages
after k re-check that 1F1B fits (with CMB when allowed); T-hat comes from the time
model in closed form (planner.time_model.predict_closed_form) with the new per-stage
costs. The simulator judges the result afterwards.
"""
from __future__ import annotations

from dataclasses import dataclass

from planner.costs import Partition, move_unit
from planner.identify import non_adjusted_set
from planner.recompute.recompute_ip import RecomputeSolution
from planner.search import Config, Setting, obscura_config
from planner.time_model import TimePrediction, predict_closed_form
from schedules import StageCosts


@dataclass(frozen=True)
class PartitionStep:
    partition: Partition
    config: Config
    solution: RecomputeSolution
    costs: StageCosts
    prediction: TimePrediction

    def step_times(self) -> tuple[float, ...]:
        """f_s + b_s + r_s per stage."""
        c = self.costs
        return tuple(c.fwd[s] + c.backward_time(s, bool(self.config.recompute[s]))
                     for s in range(len(self.partition)))


@dataclass(frozen=True)
class AdjustResult:
    partition: Partition
    moves: tuple[tuple[int, int], ...]      # (from stage, to stage), kept moves
    undone: tuple[int, int] | None          # the overshooting move taken back
    stopped: str                            # why the loop ended


def plan_step(setting: Setting, partition: Partition, k: int, lam_k: int | None, beta: float,
              cmb: bool, ip: bool, order=None) -> PartitionStep | None:
    """Recompute IP + time model for one partition; None if some stage cannot fit.
    `order`: the F/B order to size memory with (the start partition's, so a move
    costs one IP solve, not a new generation)."""
    fixed = fixed_sets(setting, partition, k, cmb)
    if fixed is None:
        return None
    found = obscura_config(setting, partition, k, fixed, lam_k, beta, ip, None, order)
    if found is None:
        return None
    config, sol = found
    costs = setting.costs(partition, config.recompute)
    pred = predict_closed_form(costs, setting.num_microbatches, k, config.swap_blocks, config.beta,
                               recompute_stages=[s for s in range(len(partition)) if config.recompute[s]])
    return PartitionStep(partition, config, sol, costs, pred)


def adjust_partition(setting: Setting, partition: Partition, k: int, lam_k: int | None, beta: float,
                     cmb: bool = True, ip: bool = True, order=None) -> AdjustResult:
    """Algorithm 1 from `partition` with adjusted stages 0..k at swap point (lam_k, beta)."""
    p = len(partition)
    if k < 0 or k >= p - 1:
        return AdjustResult(partition, (), None, "nothing to balance")
    cur = plan_step(setting, partition, k, lam_k, beta, cmb, ip, order)
    if cur is None:
        return AdjustResult(partition, (), None, "start does not fit")
    history: list[tuple[PartitionStep, tuple[int, int]]] = []
    stopped = "iteration cap"
    for _ in range(setting.profile.num_units):
        if not cur.prediction.adjusted_bottleneck:
            stopped = "balanced"
            break
        steps = cur.step_times()
        src = max(range(k + 1), key=lambda s: steps[s])
        nxt = None
        if cur.partition[src][1] - cur.partition[src][0] >= 2:
            for dst in sorted(range(k + 1, p), key=lambda s: steps[s]):
                nxt = plan_step(setting, move_unit(cur.partition, src, dst), k, lam_k, beta, cmb, ip, order)
                if nxt is not None:
                    history.append((cur, (src, dst)))
                    break
        if nxt is None:
            stopped = "no move fits"
            break
        cur = nxt
    undone = None
    if stopped == "balanced" and history:
        cur, undone = history.pop()
    return AdjustResult(cur.partition, tuple(mv for _, mv in history), undone, stopped)


def fixed_sets(setting: Setting, partition: Partition, k: int, cmb: bool) -> list[frozenset[str]] | None:
    """Recompute sets of the stages after k (nothing or CMB), or None if one cannot fit 1F1B."""
    p, m = len(partition), setting.num_microbatches
    out: list[frozenset[str]] = []
    for s in range(p):
        if s <= k:
            out.append(frozenset())
            continue
        r = non_adjusted_set(setting.profile, partition[s], s, p, m, setting.memory_limit, cmb,
                             setting.unit_kept)
        if r is None:
            return None
        out.append(r)
    return out
