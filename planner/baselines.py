"""The paper's baselines (docs/obscura.md, section 9), simulated with the same profile, the
even partition and the same memory accounting as the plan:

    dapple       1F1B, no recompute
    dapple_plus  1F1B, full recompute of every UNIT (attention, MLP) on every stage
                 (Recomp-All, "DAPPLE+ (unit)": each unit keeps its own input)
    dapple_plus_layer  the same with one checkpoint per transformer LAYER (policy
                 `layer`: the layer input only), DAPPLE+ as the paper runs it
                 (DeepSpeed; MaxText `remat_policy: full`)
    recomp       Recomp-N: full recompute on stages 0..N, N from identification
                 without CMB (the stages whose 1F1B memory exceeds the limit)
    ohp_cmb      1F1B with the CMB set recomputed on every stage
    strawman     the pipeline transformation alone (section 3): stages 0..N
                 migrate forwards and fully recompute

A baseline whose predicted peak exceeds the limit on some stage does not run
(its plan entry is null). Also the floor of the planner's configuration space
(`minimum_memory`): the least memory any configuration it may choose needs, with
whole-unit recompute and the most swapping (used to name the smallest feasible
limit when a limit is infeasible), found by simulating only the candidates whose
`peak_lower_bound` could still beat the best.
"""
from __future__ import annotations

import math

from planner.costs import Partition, kept_bytes, program_outputs, working_bytes
from planner.identify import cmb_set, identify, stage_peak_1f1b
from planner.profile import FULL, LAYER
from planner.search import (Config, Evaluation, Setting, base_order, recompute_names,
                            simulate_config, swap_options, swapped_rows, warmups_of_rows)
from planner.time_model import swap_hides
from schedules.generators.swap import chain_swap_blocks
from schedules.ir import BACKWARD_INPUT_KINDS
from schedules.memory import StageMemory, Uniform, order_memory

_FULL = frozenset({FULL})
_LAYER = frozenset({LAYER})


def baseline_configs(setting: Setting, partition: Partition) -> dict[str, Config]:
    p = len(partition)
    none, zeros = (frozenset(),) * p, (0,) * p
    n = identify(setting.profile, partition, setting.num_microbatches, setting.memory_limit, cmb=False,
                 unit_kept=setting.unit_kept).last_adjusted
    dapple = Config("1f1b", partition, (), none, zeros)
    on_demand = tuple(_FULL if s <= n else frozenset() for s in range(p))
    return {
        "dapple": dapple,
        "dapple_plus": Config("recomp", partition, tuple(range(p)), (_FULL,) * p, zeros),
        "dapple_plus_layer": Config("recomp", partition, tuple(range(p)), (_LAYER,) * p, zeros),
        "recomp": dapple if n < 0 else Config("recomp", partition, tuple(range(n + 1)), on_demand, zeros),
        "ohp_cmb": Config("1f1b", partition, (), (cmb_set(setting.profile),) * p, zeros),
        "strawman": dapple if n < 0 else Config("strawman", partition, tuple(range(n + 1)), on_demand, zeros),
    }


def evaluate_baselines(setting: Setting, partition: Partition) -> dict[str, Evaluation]:
    return {name: simulate_config(setting, cfg) for name, cfg in baseline_configs(setting, partition).items()}


def minimum_memory(setting: Setting, partition: Partition, cmb: bool = True, swap: bool = True
                   ) -> tuple[float, Evaluation | None]:
    """(least max-stage peak over the configurations the planner may choose, the
    evaluation that reaches it): the first of `floor_candidates` with the least peak.
    Candidates are simulated in order of `peak_lower_bound`, and those whose bound
    cannot beat the best so far are never simulated: the same answer as simulating
    every one (tests/planner/test_baselines.py checks) for a fraction of the simulations."""
    free = Setting(setting.profile, setting.num_microbatches, math.inf, setting.unit_kept)
    candidates = floor_candidates(setting, partition, cmb, swap)
    bounds = [peak_lower_bound(free, cfg) for cfg in candidates]
    best, best_i, best_ev = math.inf, len(candidates), None
    for i in sorted(range(len(candidates)), key=lambda i: (bounds[i], i)):
        if (bounds[i], i) > (best, best_i):
            break   # every later candidate's bound is higher still: none can come first
        ev = simulate_config(free, candidates[i])
        if (max(ev.peaks), i) < (best, best_i):
            best, best_i, best_ev = max(ev.peaks), i, ev
    if best_ev is not None:
        best_ev = simulate_config(setting, best_ev.config)  # judged against the real limit
    return best, best_ev


def floor_candidates(setting: Setting, partition: Partition, cmb: bool = True, swap: bool = True
                     ) -> list[Config]:
    """The configurations `minimum_memory` chooses from: 1F1B, then for k = 0..p-1
    adjusted stages 0..k recomputing whole units and swapping at every grid point
    whose blocks hide (the IP's constraint); stages after k keep 1F1B with nothing
    or CMB, whichever needs less."""
    prof, m = setting.profile, setting.num_microbatches
    p = len(partition)
    free = Setting(prof, m, math.inf, setting.unit_kept)
    cmb_ops = cmb_set(prof) if cmb else frozenset()
    low = []
    for s, units in enumerate(partition):
        options = [frozenset()] + ([cmb_ops] if cmb_ops else [])
        low.append(min(options, key=lambda r: stage_peak_1f1b(prof, units, s, p, m, r, setting.unit_kept)))
    candidates = [Config("1f1b", partition, (), tuple(low), (0,) * p)]
    for k in range(p):
        sets = tuple(_FULL if s <= k else low[s] for s in range(p))
        order = base_order(free, partition, k, sets)
        warm = warmups_of_rows(order)
        for lam_k, beta in swap_options(k, p, warm, swap):
            lam = chain_swap_blocks(k, lam_k, warm)
            if not all(_hides(setting, partition[s], beta, lam[s]) for s in range(k + 1)):
                continue
            candidates.append(Config("obscura", partition, tuple(range(k + 1)), sets, lam,
                                     beta if any(lam) else 0.0, order))
    return candidates


def peak_lower_bound(setting: Setting, config: Config) -> float:
    """A number at most max(simulate_config(setting, config).peaks), without the
    simulation; -inf for a config without an explicit order. From the one
    accounting (schedules.memory): F allocates its stage's kept bytes at its start;
    only B/W free a block (at their end, after every warm-up forward of the stage
    has started); an SO frees at most beta of a block, and only SOs listed before a
    forward can have ended by its start; the inbox adds nothing negative. So a
    stage holds at least the fold's count over its warm-up order (order_memory: each
    SO done at its place) in kept bytes, on top of its weights and working set (the
    same StageCosts and working_bytes as simulate_config). Lowered by 1e-9
    relative against rounding."""
    if config.order is None:
        return -math.inf
    prof = setting.profile
    costs = setting.costs(config.partition, config.recompute)
    rows = swapped_rows(config.order, config.adjusted, config.swap_blocks, config.beta)
    counted = Uniform(StageMemory(kept=1.0, swap_fraction=config.beta))
    bound = -math.inf
    for s, (row, units, r) in enumerate(zip(rows, config.partition, config.recompute)):
        first_b = next((i for i, a in enumerate(row) if a.kind in BACKWARD_INPUT_KINDS), len(row))
        blocks = order_memory(row[:first_b], counted).peak_activation_bytes   # at a warm-up forward's start
        kept = costs.kept_bytes(s, bool(recompute_names(r, setting.op_order)))
        held = blocks * kept if costs.fwd[s] > 0 else 0.0   # zero-time ops could free at that instant
        need = costs.weight_bytes[s] + held + working_bytes(prof, units, r) + program_outputs(costs, s, False)
        bound = max(bound, need - 1e-9 * abs(need))
    return bound


def _hides(setting: Setting, units: tuple[int, int], beta: float, lam: int) -> bool:
    if lam == 0 or beta == 0:
        return True
    prof = setting.profile
    kinds = prof.kinds[units[0]:units[1]]
    f = sum(prof.unit(k).fwd_time for k in kinds)
    b = sum(prof.unit(k).bwd_time for k in kinds)
    return swap_hides(kept_bytes(prof, units, _FULL, setting.unit_kept), beta, prof.host_bandwidth, f, b, f)
