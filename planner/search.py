"""Configurations, their simulation, and the swapping-aware search on one partition.

A `Config` is everything a plan fixes: generator, partition, transformed stages,
per-stage recompute sets, per-stage swap blocks and beta. `simulate_config` builds its
schedule, its StageCosts (planner.costs) and simulates it; the simulator is the
judge of time and of memory. A stage's predicted peak is W_s + A_s + the
rematerialisation working set, where A_s is the timeline's held peak
(schedules.memory, the one accounting: residuals as the simulation times them plus
the inbox, activations and gradients received but not yet consumed, as the engine
counts them), plus XLA's scratch where the profile records it (planner.costs).

Swap grid (docs/obscura.md, section 5: Eq. 4): lambda_k, the blocks the last adjusted stage
evicts in warm-up, runs over 0..min(w_k - 1, max(2, p - k - 2)) (the paper's
[2, p-k-2] widened so short pipelines still try some swapping; w_k is stage k's
warm-up forwards, the generator's cap), earlier stages evict one more each; beta
runs over BETA_GRID. "No swap" is always a candidate. For each point the recompute
IP (planner.recompute.recompute_ip) picks the ops; the best point is the one with the
shortest SIMULATED iteration, ties going to less host traffic, then less memory.
"""
from __future__ import annotations

import math
from functools import cached_property, lru_cache
from dataclasses import dataclass, field, replace
from typing import Sequence

from planner.costs import Partition, program_outputs, stage_costs, stage_views, working_bytes
from planner.identify import cmb_set
from planner.profile import FULL, LAYER, Profile
from planner.recompute.recompute_ip import RecomputeProblem, RecomputeSolution, StageProblem, score_closed_form, solve
from planner.recompute.residuals import UnitKept, marginal_op_bytes
from schedules import Action, Schedule, StageCosts, StageSpec, Timeline, generate
from schedules.simulator import held_peaks, simulate
from schedules.generators.common import assemble, warmup_count
from schedules.memory import StageMemory, Uniform, order_memory
from schedules.generators.swap import add_swaps, chain_swap_blocks, resolve_swap_blocks

BETA_GRID = (0.25, 0.5, 0.75, 1.0)
MIGRATION_FRACTIONS = (0.0, 0.25, 0.5, 1.0)
MAX_TIGHTEN = 8


@dataclass(frozen=True)
class Setting:
    """What every evaluation of one planning problem shares."""
    profile: Profile
    num_microbatches: int
    memory_limit: float
    unit_kept: UnitKept | None = field(default=None, compare=False)
    weight_grad: str = "hold"        # a split backward's W: hold its inputs, or rederive them

    @property
    def op_order(self) -> tuple[str, ...]:
        return self.profile.op_names

    def costs(self, partition: Partition, recompute_sets) -> StageCosts:
        """planner.costs.stage_costs for this problem: its traced kept bytes, its W."""
        return stage_costs(self.profile, partition, recompute_sets, unit_kept=self.unit_kept,
                           weight_grad=self.weight_grad)


@dataclass(frozen=True)
class Config:
    schedule: str                            # generator name
    partition: Partition
    adjusted: tuple[int, ...]                # stages in the generator's adjusted role
    recompute: tuple[frozenset[str], ...]    # per stage
    swap_blocks: tuple[int, ...]             # lambda_s per stage
    beta: float = 0.0
    order: tuple[tuple[Action, ...], ...] | None = None  # F/B rows before swaps; None: the generator's
    virtual_stages: int = 1                  # model chunks per device (interleaved; planner.families)


@dataclass(frozen=True)
class Evaluation:
    config: Config
    schedule: Schedule
    costs: StageCosts
    makespan: float
    activation_bytes: tuple[float, ...]
    working_bytes: tuple[float, ...]
    peaks: tuple[float, ...]                 # W_s + A_s + working set
    memory_limit: float
    solution: RecomputeSolution | None = None

    @cached_property
    def timeline(self) -> Timeline:
        """The simulation with every statistic, built when first asked for (a search
        compares makespans and peaks only: schedules.simulator.held_peaks)."""
        return simulate_renamed(self.schedule, self.costs)

    @property
    def fits(self) -> bool:
        return all(pk <= self.memory_limit for pk in self.peaks)


def recompute_names(recompute: frozenset[str], op_order: Sequence[str]) -> tuple[str, ...]:
    """A stage's recompute set as the IR/plan writes it: ("full",), ("layer",) or ops in forward order."""
    if FULL in recompute:
        return (FULL,)
    if LAYER in recompute:
        return (LAYER,)
    return tuple(o for o in op_order if o in recompute) + tuple(sorted(set(recompute) - set(op_order)))


def with_swaps(name: str, num_microbatches: int, rows, adjusted: Sequence[int], swap_blocks: Sequence[int],
               beta: float) -> Schedule:
    """F/B rows + the swap pass (schedules.generators.swap) -> validated Schedule."""
    lam = tuple(swap_blocks)
    if any(lam):
        lam = resolve_swap_blocks(lam, beta, [list(r) for r in rows], tuple(adjusted))
    return assemble(name, num_microbatches, swapped_rows(rows, adjusted, lam, beta), tuple(adjusted), ("full",),
                    lam, beta if any(lam) else 0.0)


def swapped_rows(rows, adjusted: Sequence[int], swap_blocks: Sequence[int], beta: float) -> list[list[Action]]:
    """The rows with_swaps assembles: F/B rows + the swap pass."""
    rows, lam = [list(r) for r in rows], tuple(swap_blocks)
    return add_swaps(rows, resolve_swap_blocks(lam, beta, rows, tuple(adjusted))) if any(lam) else rows


def build_schedule(config: Config, num_microbatches: int, op_order: Sequence[str]) -> Schedule:
    p = len(config.partition)
    lam = tuple(config.swap_blocks)
    if config.order is not None:
        sched = with_swaps(config.schedule, num_microbatches, config.order, config.adjusted, lam, config.beta)
    else:
        sched = generate(config.schedule, p, num_microbatches,
                         adjusted=tuple(config.adjusted) if config.adjusted else None,
                         recompute=("full",), swap_blocks=lam if any(lam) else 0,
                         swap_fraction=config.beta if any(lam) else 0.0)
    stages = tuple(replace(spec, recompute=recompute_names(config.recompute[s], op_order))
                   for s, spec in enumerate(sched.stages))
    return replace(sched, stages=stages)


def base_order(setting: Setting, partition: Partition, k: int, guess: tuple[frozenset[str], ...],
               caps: tuple[int, ...] | None = None) -> tuple[tuple[Action, ...], ...]:
    """Obscura's F/B order for adjusted stages 0..k, generated under the costs of
    the recompute sets `guess` (the generator's relaxation uses the cost model),
    with in-flight caps `caps` (None: the generator's own migration optimisation).
    The swap pass is added per swap point."""
    return _base_order(setting.profile, setting.num_microbatches, setting.unit_kept, partition, k, guess,
                       caps)


@lru_cache(maxsize=256)
def _base_order(profile, m, unit_kept, partition, k, guess, caps):
    if isinstance(caps, str):  # the strawman's or Recomp's own order
        sched = generate(caps, len(partition), m, adjusted=k)
    else:
        costs = stage_costs(profile, partition, guess, unit_kept=unit_kept)
        sched = generate("obscura", len(partition), m, adjusted=k, costs=costs, warmup=caps)
    return tuple(spec.actions for spec in sched.stages)


def cap_options(num_stages: int, num_microbatches: int, k: int) -> list[tuple[int, ...] | str | None]:
    """Orders to try, by their in-flight caps mu_s: the generator's cost-aware
    choice (None); p - s + j on every adjusted stage for j a fraction
    MIGRATION_FRACTIONS of the paper's 2(p-k-1) migrated forwards (j = 0:
    relaxation without migration); and, unrelaxed, the strawman's and Recomp's own
    orders ("strawman", "recomp"), so the search space holds both baselines."""
    p, m = num_stages, num_microbatches
    full = 2 * (p - k - 1)
    out: list[tuple[int, ...] | str | None] = [None]
    for frac in MIGRATION_FRACTIONS:
        j = math.ceil(frac * full)
        caps = tuple(min(m, p - s + j) if s <= k else min(m, p - s) for s in range(p))
        if caps not in out:
            out.append(caps)
    return out + ["strawman", "recomp"]


def simulate_config(setting: Setting, config: Config, solution: RecomputeSolution | None = None) -> Evaluation:
    """The configuration's schedule and StageCosts, simulated: the simulator's
    makespan and peaks (with the counts above) judge it."""
    prof = setting.profile
    sched = build_schedule(config, setting.num_microbatches, setting.op_order)
    costs = setting.costs(config.partition, config.recompute)
    makespan, act = held_peaks(sched, costs, check=False)   # build_schedule validated it
    work = tuple(working_bytes(prof, units, r) + program_outputs(costs, s, False)
                 for s, (units, r) in enumerate(zip(config.partition, config.recompute)))
    peaks = tuple(costs.weight_bytes[s] + act[s] + work[s] for s in range(len(act)))
    return Evaluation(config, sched, costs, makespan, act, work, peaks, setting.memory_limit, solution)


def simulate_renamed(sched: Schedule, costs: StageCosts) -> Timeline:
    """schedules.simulate without validating again: for a generated (validated) schedule given its
    recompute names by `replace` (a new Schedule to the validator's memo; it reads no names)."""
    return simulate(sched, costs, check=False)


def swap_options(k: int, num_stages: int, warm: Sequence[int], swap: bool
                 ) -> list[tuple[int | None, float]]:
    opts: list[tuple[int | None, float]] = [(None, 0.0)]
    if not swap or k < 0:
        return opts
    top = min(warm[k] - 1, max(2, num_stages - k - 2))
    for lam_k in range(0 if k > 0 else 1, top + 1):
        for beta in BETA_GRID:
            opts.append((lam_k, beta))
    return opts


def stage_problem(setting: Setting, partition: Partition, s: int, resident: float, lam: int,
                  slack: float) -> StageProblem:
    """Stage s's data for the IP. With a traceable model the per-op bytes are what
    recomputing each op alone frees (planner.recompute.residuals.marginal_op_bytes), so the IP
    does not count on savings JAX would not make; otherwise the profile's bytes."""
    prof = setting.profile
    v = stage_views(prof, partition)[s]
    kinds = tuple(dict.fromkeys(v.kinds))
    per_kind = tuple(tuple(_op_bytes(prof, kind, n) for n in v.op_names) for kind in kinds)
    op_bytes, base = tuple(b for _, b in v.op_bytes), v.input_bytes
    marginal = marginal_op_bytes(prof) if setting.unit_kept is not None else None
    if marginal is not None:
        counts = {kind: v.kinds.count(kind) for kind in kinds}
        base = sum(counts[kd] * marginal[kd][0] for kd in kinds)
        op_bytes = tuple(sum(counts[kd] * marginal[kd][1].get(n, 0.0) for kd in kinds) for n in v.op_names)
    caps = tuple((v.kinds.count(kind), prof.unit(kind).full_recompute,
                  tuple(_op_time(prof, kind, n) for n in v.op_names)) for kind in kinds)
    return StageProblem(
        ops=v.op_names, op_time=tuple(t for _, t in v.op_time), op_bytes=op_bytes,
        unit_op_bytes=per_kind, base_bytes=base,
        full_time=sum(prof.unit(k).full_recompute for k in v.kinds), fwd=v.fwd, bwd=v.bwd,
        weight_bytes=v.weight_bytes, resident=resident, swap_blocks=lam,
        memory_limit=setting.memory_limit - slack, full_bytes=v.input_bytes, unit_caps=caps)


def _op_time(profile: Profile, kind: str, name: str) -> float:
    unit = profile.unit(kind)
    return unit.op(name).fwd_time if name in unit.op_names else 0.0


def _op_bytes(profile: Profile, kind: str, name: str) -> float:
    unit = profile.unit(kind)
    return unit.op(name).act_bytes if name in unit.op_names else 0.0


def obscura_config(setting: Setting, partition: Partition, k: int, fixed: Sequence[frozenset[str]],
                   lam_k: int | None, beta: float, ip: bool = True,
                   slack: Sequence[float] | None = None,
                   order: tuple[tuple[Action, ...], ...] | None = None,
                   resident: Sequence[float | None] | None = None
                   ) -> tuple[Config, RecomputeSolution] | None:
    """Solve Eq. 4 for adjusted stages 0..k at one swap point on the F/B `order`
    (default: generated under whole-unit recompute); stages after k keep `fixed`
    (nothing or CMB). None when nothing fits."""
    p, m = len(partition), setting.num_microbatches
    if order is None:
        order = base_order(setting, partition, k, order_guess(setting, k, fixed))
    lam = chain_swap_blocks(k, lam_k, warmups_of_rows(order))
    if any(lam) and beta <= 0:
        return None
    b = beta if any(lam) else 0.0
    # only for the resident-block count; the config's schedule is validated when it is simulated
    sched = Schedule("obscura", p, m, tuple(StageSpec(tuple(r)) for r in swapped_rows(order, range(k + 1), lam, b)))
    slack = tuple(slack) if slack is not None else (0.0,) * p
    views = stage_views(setting.profile, partition)
    c_non = max((views[s].fwd + views[s].bwd
                 + sum(setting.profile.unit(kd).recompute_time(fixed[s]) for kd in views[s].kinds)
                 for s in range(k + 1, p)), default=0.0)
    floor = tuple(resident) if resident is not None else (None,) * p
    problems = tuple(stage_problem(setting, partition, s, max(resident_blocks(sched, s, b), floor[s] or 0.0),
                                   lam[s], slack[s])
                     for s in range(k + 1))
    problem = RecomputeProblem(problems, p, m, b, setting.profile.host_bandwidth, c_non)
    if ip:
        sol = solve(problem)
    else:  # relaxation only: whole-unit recompute on every adjusted stage
        sets = (frozenset({FULL}),) * (k + 1)
        ok, t0, _, choices = score_closed_form(problem, sets)
        sol = RecomputeSolution(choices, t0, "FULL") if ok else None
    if sol is None:
        return None
    recompute = tuple(sol.sets[s] if s <= k else frozenset(fixed[s]) for s in range(p))
    return Config("obscura", partition, tuple(range(k + 1)), recompute, lam, b, order), sol


def resident_blocks(schedule: Schedule, stage: int, beta: float | None = None) -> float:
    """c_s of the recompute IP (Eq. 1 over a concrete order): the most blocks the
    stage's own order keeps resident, a swapped one counting 1 - beta (`beta`
    defaults to the stage's swap fraction): the one memory fold over the order
    (schedules.memory.order_memory), each block one byte. It takes each action as
    done at its position, so it is exact whenever swaps end before the next
    forward (the simulator, which times them, may see more)."""
    spec = schedule.stages[stage]
    b = spec.swap_fraction if beta is None else beta
    return order_memory(spec.actions, Uniform(StageMemory(kept=1.0, swap_fraction=b))).peak_activation_bytes


def warmups_of_rows(rows) -> tuple[int, ...]:
    """Forwards each row runs before its first backward (B or I)."""
    return tuple(warmup_count(row) for row in rows)


def warmups(schedule: Schedule) -> tuple[int, ...]:
    return warmups_of_rows(spec.actions for spec in schedule.stages)


def settle(setting: Setting, partition: Partition, k: int, fixed: Sequence[frozenset[str]],
           lam_k: int | None, beta: float, ip: bool = True,
           order: tuple[tuple[Action, ...], ...] | None = None) -> Evaluation | None:
    """obscura_config, then simulate. Where a stage's predicted peak exceeds the
    limit (swaps that end after the next forward starts, activations waiting in
    the inbox, traced residuals above the additive figure), solve again with that
    stage's resident blocks raised to what the simulation saw (simulated peak /
    kept bytes) and, from the second round on, its budget cut by the excess too.
    None when it cannot be made to fit."""
    p = len(partition)
    slack = [0.0] * p
    resident: list[float | None] = [None] * p
    for round_ in range(MAX_TIGHTEN):
        found = obscura_config(setting, partition, k, fixed, lam_k, beta, ip, slack, order, resident)
        if found is None:
            return None
        ev = simulate_config(setting, found[0], found[1])
        if ev.fits:
            return ev
        over = [(s, ev.peaks[s] - setting.memory_limit) for s in range(p) if ev.peaks[s] > setting.memory_limit]
        if any(s > k for s, _ in over) or not ip:
            return None  # a 1F1B stage or whole-unit recompute: nothing left to tighten
        for s, excess in over:
            kept = ev.costs.kept_bytes(s, True)
            if kept > 0:
                resident[s] = max(resident[s] or 0.0, ev.activation_bytes[s] / kept)
            if round_ > 0:
                slack[s] += excess * 1.01 + 1e-9 * setting.memory_limit
    return None


def rank(ev: Evaluation) -> tuple:
    """Shortest simulated iteration; ties (1e-9 relative) to less host traffic,
    then to the lower peak."""
    traffic = sum(l * ev.config.beta for l in ev.config.swap_blocks)
    return (_bucket(ev.makespan), traffic, max(ev.peaks))


def _bucket(t: float) -> float:
    if t <= 0:
        return 0.0
    return round(t, -int(math.floor(math.log10(t))) + 9)


def order_guess(setting: Setting, k: int, fixed: Sequence[frozenset[str]]) -> tuple[frozenset[str], ...]:
    """Recompute sets whose costs the order is generated under, before the IP has
    chosen: the CMB set on adjusted stages (cheap recompute, as most choices are),
    whole units when the family has none."""
    cmb = cmb_set(setting.profile) or frozenset({FULL})
    return tuple(cmb if s <= k else frozenset(fixed[s]) for s in range(len(fixed)))


def best_obscura(setting: Setting, partition: Partition, k: int, fixed: Sequence[frozenset[str]],
                 swap: bool = True, ip: bool = True) -> Evaluation | None:
    """The best simulated configuration over in-flight caps x swap grid.

    Coordinate search, to keep planning fast: every cap option (cap_options) is
    probed at two swap points (none, and the most blocks at beta = 1); the full swap
    grid then runs on the best caps. If no probe fits anywhere, the full grid runs
    on every cap option. A point met again (a probe inside the grid, two cap options
    giving one order) is settled once."""
    p, m = len(partition), setting.num_microbatches
    guess = order_guess(setting, k, fixed)
    orders = [base_order(setting, partition, k, guess, caps) for caps in cap_options(p, m, k)]
    probes: list[tuple[Evaluation | None, tuple]] = []
    memo: dict = {}
    for order in orders:
        grid = swap_options(k, p, warmups_of_rows(order), swap)
        points = [grid[0]] + ([max(grid[1:], key=lambda g: (g[0], g[1]))] if len(grid) > 1 else [])
        probes.append((_best_of(setting, partition, k, fixed, ip, order, points, memo), order))
    found = [(ev, order) for ev, order in probes if ev is not None]
    if found:
        best, order = min(found, key=lambda t: rank(t[0]))
        candidates = [order]
    else:
        best, candidates = None, orders
    for order in candidates:
        ev = _best_of(setting, partition, k, fixed, ip, order, swap_options(k, p, warmups_of_rows(order), swap), memo)
        if ev is not None and (best is None or rank(ev) < rank(best)):
            best = ev
    return best


def _best_of(setting, partition, k, fixed, ip, order, points, memo) -> Evaluation | None:
    best = None
    for lam_k, beta in points:
        if (order, lam_k, beta) not in memo:   # settle is a function of these (the rest is fixed)
            memo[order, lam_k, beta] = settle(setting, partition, k, fixed, lam_k, beta, ip, order)
        ev = memo[order, lam_k, beta]
        if ev is not None and (best is None or rank(ev) < rank(best)):
            best = ev
    return best


def swap_point(ev: Evaluation, k: int) -> tuple[int | None, float]:
    """The (lambda_k, beta) grid point an evaluation was made at."""
    lam = ev.config.swap_blocks
    if not any(lam):
        return None, 0.0
    return lam[k] if k >= 0 else None, ev.config.beta
