"""One search for every schedule family: Obscura's choices on each family's own order.

For a family (planner.families: its generator, chunks per device, and the generator
of Obscura's transformation on it where one exists) the search tries, under the
memory limit and judged by the simulator and the one memory fold:

    plain        the family's order; each device recomputes the least that fits
                 (per stage, per-op sets: planner.device_choice over
                 planner.recompute.recompute_options, sized by planner.recompute.memory_rows)
    + swaps      the same with lambda blocks per recomputing device swapped at
                 beta (the swap pass, generators/swap.py); a swapped block must
                 hide under one forward + backward (Eq. 4's constraint)
    Obscura on   the family's order transformed (dependency relaxation and
                 migration, generated under the chosen sets' costs, the stages
                 that recompute adjusted), its sets chosen again on the new order

Every candidate is simulated; one the simulator finds over the limit on a device
(the order fold does not see the inbox or a swap still copying) has that device's
room cut by what the fold missed there and is chosen again (at most MAX_TIGHTEN
times). The
family's result is its fastest fitting candidate, its fastest with no limit (the
plain order, nothing recomputed) and, when nothing fits, the least any candidate
needs.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Callable

from planner.costs import Partition, input_grad_outputs, program_outputs, stage_costs, weight_bytes, working_bytes
from planner.device_choice import choose_device, fastest, leanest
from planner.recompute.memory_rows import device_rows
from planner.profile import FULL, LAYER, Profile
from planner.recompute.recompute_options import Option, stage_options
from planner.search import BETA_GRID, Config, Evaluation, Setting, rank, recompute_names
from planner.time_model import swap_hides
from schedules import Kind, Schedule, ScheduleError, StageCosts, generate
from schedules.actions import COMPUTE_KINDS
from schedules.generators.caps import held_peaks as held_blocks
from schedules.generators.common import assemble_devices, warmup_count
from schedules.generators.join import join_first_stage_backward
from schedules.generators.swap import add_swaps
from schedules.simulator import held_peaks

MAX_TIGHTEN = 6
_WHOLE = (frozenset(), frozenset({FULL}), frozenset({LAYER}))
_NO_LIMIT = 1e30   # bytes: more than any device holds (the heuristic wants a finite limit)


@dataclass(frozen=True)
class Candidate:
    """One way to run a family, as evaluated."""
    variant: str                 # "plain", "plain+swap", "obscura", "obscura+swap", ...
    evaluation: Evaluation


@dataclass(frozen=True)
class FamilyResult:
    family: str
    best: Candidate | None               # fastest fitting (None: nothing fits)
    unlimited: Evaluation | None          # fastest with no limit (plain order, nothing recomputed)
    needs: float                          # the least peak any candidate needs (max over devices)
    candidates: tuple[Candidate, ...] = field(default=(), compare=False)
    note: str = ""                        # why the family could not be evaluated (then unlimited is None)


def compute_rows(schedule: Schedule) -> list[list]:
    """The schedule's device rows without its swaps."""
    return [[a for a in row if a.kind in COMPUTE_KINDS] for row in schedule.rows]


def _placed(name: str, base: Schedule, rows, swap_blocks, beta: float) -> Schedule:
    """A validated Schedule of `rows` (swaps added) on base's placement, nothing recomputed."""
    rows = add_swaps(rows, swap_blocks) if any(swap_blocks) else [list(r) for r in rows]
    return assemble_devices(name, base.num_microbatches, rows, base.stage_to_device, (), (),
                            beta if any(swap_blocks) else 0.0)


def _with_sets(sched: Schedule, recompute, op_order) -> Schedule:
    """`sched` with each stage's recompute set (the order is the same: no new validation)."""
    stages = tuple(replace(spec, recompute=recompute_names(recompute[s], op_order))
                   for s, spec in enumerate(sched.stages))
    return replace(sched, stages=stages)


def evaluate(setting: Setting, placed: Schedule, partition: Partition, recompute, virtual_stages: int = 1
             ) -> Evaluation:
    """Simulate one family configuration (`placed`: its order with its swaps); peaks
    are per DEVICE: its stages' weights, its held activations and inbox (the fold on
    the simulated timeline), and the largest rematerialisation working set among its
    stages."""
    prof = setting.profile
    sched = _with_sets(placed, recompute, setting.op_order)
    costs = setting.costs(partition, recompute)
    makespan, act = held_peaks(sched, costs, check=False)
    devices = range(sched.num_devices)
    split = {a.stage for row in sched.rows for a in row if a.kind == Kind.W}
    per_stage = [working_bytes(prof, u, r) + program_outputs(costs, s, s in split,
                                                             input_grad_outputs(prof, u, setting.weight_grad))
                 for s, (u, r) in enumerate(zip(partition, recompute))]
    work = tuple(max(per_stage[s] for s in sched.stages_on(d)) for d in devices)
    weights = [sum(costs.weight_bytes[s] for s in sched.stages_on(d)) for d in devices]
    peaks = tuple(weights[d] + act[d] + work[d] for d in devices)
    adjusted = tuple(s for s in range(len(partition)) if recompute[s])
    lam = tuple(spec.swap_blocks for spec in sched.stages)
    beta = max((spec.swap_fraction for spec in sched.stages), default=0.0)
    config = Config(sched.name, partition, adjusted, tuple(recompute), lam, beta if any(lam) else 0.0,
                    virtual_stages=virtual_stages)
    return Evaluation(config, sched, costs, makespan, act, work, peaks, setting.memory_limit)


@dataclass
class _Order:
    """An order under search: its compute rows, per-stage options and the fold's rows."""
    setting: Setting
    name: str
    base: Schedule
    partition: Partition
    rows: list
    virtual_stages: int
    per_op: bool = True      # choose op sets (off: whole units or nothing, the IP ablation)

    def options(self) -> list[tuple[Option, ...]]:
        prof = self.setting.profile
        traced = self.setting.unit_kept is not None
        opts = [stage_options(prof, u, traced) for u in self.partition]
        if not self.per_op:
            opts = [tuple(o for o in opt if o.recompute in _WHOLE) for opt in opts]
        return opts


def settle(order: _Order, swap_blocks=None, beta: float = 0.0, limit: float | None = None
           ) -> tuple[Evaluation | None, Evaluation]:
    """(the fastest fitting evaluation of `order` at this swap point, None) with
    each device's sets chosen for `limit` (default the setting's); when nothing
    fits, (None, the leanest evaluation: what the order needs at least)."""
    setting, part = order.setting, order.partition
    prof = setting.profile
    limit = setting.memory_limit if limit is None else limit
    lam = tuple(swap_blocks) if swap_blocks is not None else (0,) * len(order.rows)
    placed = _placed(order.name, order.base, order.rows, lam, beta)
    none_costs = setting.costs(part, [frozenset()] * len(part))
    options = order.options()
    weights = [sum(weight_bytes(prof, part[s]) for s in placed.stages_on(d)) for d in range(placed.num_devices)]
    rows = [device_rows(placed, none_costs, d) for d in range(placed.num_devices)]
    allowed = _hiding(prof, part, placed, beta, lam)

    def lean_ev() -> Evaluation:
        lean = _sets(rows, [leanest(r, [options[s] for s in r.stages]) for r in rows], len(part))
        return evaluate(setting, placed, part, lean, order.virtual_stages)
    margin = [0.0] * len(rows)
    chosen: list = [None] * len(rows)
    redo = set(range(len(rows)))
    for _ in range(MAX_TIGHTEN):
        for d in sorted(redo):
            r = rows[d]
            got = choose_device(r, [options[s] for s in r.stages], limit - weights[d] - margin[d],
                                (lambda i, o, r=r: allowed(r.stages[i], o)) if allowed else None)
            if got is None:     # by the order's fold; the simulator, the judge, may still fit the leanest
                lean = lean_ev()
                return (lean, None) if lean.fits else (None, lean)
            chosen[d] = got
        ev = evaluate(setting, placed, part, _sets(rows, chosen, len(part)), order.virtual_stages)
        redo = {d for d, pk in enumerate(ev.peaks) if pk > limit}
        if not redo:
            return ev, None
        for d in redo:   # what the fold over the order missed on this device, and a little more
            unseen = ev.peaks[d] - weights[d] - chosen[d].peak
            margin[d] = max(margin[d] + (ev.peaks[d] - limit), unseen) * 1.01 + 1e-9 * limit
    return None, lean_ev()


def _sets(rows, chosen, num_stages: int) -> tuple[frozenset[str], ...]:
    out = [frozenset()] * num_stages
    for r, c in zip(rows, chosen):
        for s, o in zip(r.stages, c.options):
            out[s] = o.recompute
    return tuple(out)


def _hiding(prof: Profile, partition: Partition, sched: Schedule, beta: float, lam) -> Callable | None:
    """A filter of options on swapping devices: a swapped block must hide (Eq. 4)."""
    if not any(lam) or beta <= 0:
        return None
    swapping = {s for s in range(len(partition)) if lam[sched.stage_to_device[s]]}
    costs = stage_costs(prof, partition, [frozenset()] * len(partition))

    def ok(stage: int, option: Option) -> bool:
        if stage not in swapping:
            return True
        return swap_hides(option.kept, beta, prof.host_bandwidth, costs.fwd[stage], costs.bwd[stage], option.time)
    return ok


SWAP_WORTH = 0.005   # swaps are searched only where recompute costs at least this share of the iteration


def _swapping_can_pay(ev: Evaluation | None) -> bool:
    """Whether swapping could save a noticeable share of the iteration: at most it
    saves the recompute of the busiest device (m times its backwards' recompute)."""
    if ev is None:
        return True
    costs, sched = ev.costs, ev.schedule
    m = sched.num_microbatches
    busiest = max(sum(costs.recompute[s] for s in sched.stages_on(d) if ev.config.recompute[s])
                  for d in range(sched.num_devices))
    return m * busiest >= SWAP_WORTH * ev.makespan


def _can_hide(order: _Order) -> Callable:
    """(lam, beta) -> whether every swapping device has a stage choice whose swapped
    share hides (Eq. 4), so a swap point no choice can meet is not built at all."""
    prof, part = order.setting.profile, order.partition
    costs = stage_costs(prof, part, [frozenset()] * len(part))
    options = order.options()
    where = order.base.stage_to_device

    def ok(lam, beta) -> bool:
        return all(any(swap_hides(o.kept, beta, prof.host_bandwidth, costs.fwd[s], costs.bwd[s], o.time)
                       for o in options[s])
                   for s in range(len(part)) if lam[where[s]])
    return ok


def unlimited(order: _Order) -> Evaluation:
    """The order with nothing recomputed and no swaps: the family's fastest."""
    n = len(order.partition)
    placed = _placed(order.name, order.base, order.rows, (0,) * len(order.rows), 0.0)
    return evaluate(order.setting, placed, order.partition, (frozenset(),) * n, order.virtual_stages)


def swap_lambdas(rows, recomputing_devices) -> list[tuple[int, ...]]:
    """lambda per device to try: every recomputing device swaps lam blocks (at most
    its warm-up forwards less one), lam = 1, 2, 4, ... up to the largest warm-up."""
    warm = [warmup_count(r) for r in rows]
    top = max((warm[d] - 1 for d in recomputing_devices), default=0)
    out, lam = [], 1
    while lam <= top:
        per = tuple(min(lam, warm[d] - 1) if d in recomputing_devices else 0 for d in range(len(rows)))
        if any(per) and per not in out:
            out.append(per)
        lam *= 2
    return out


def best_of(candidates: list[Candidate]) -> Candidate | None:
    fitting = [c for c in candidates if c.evaluation.fits]
    return min(fitting, key=lambda c: rank(c.evaluation)) if fitting else None


def search_order(order: _Order, variant: str, swap: bool) -> tuple[list[Candidate], list[Evaluation]]:
    """Every candidate of one order: no swap, then swaps on the devices that
    recompute, by coordinates: the most blocks at beta 1 and 1/2; if either beats
    not swapping, every lambda at the better beta, then every beta at the best
    lambda (BETA_GRID)."""
    found, leans = [], []
    ev, lean = settle(order)
    if lean is not None:
        leans.append(lean)
    if ev is not None:
        found.append(Candidate(variant, ev))
    recomputing = {order.base.stage_to_device[s] for s, r in enumerate((ev or lean).config.recompute) if r}
    lams = swap_lambdas(order.rows, recomputing) if swap and _swapping_can_pay(ev) else []
    if not lams:
        return found, leans
    tried: dict = {}

    hides = _can_hide(order)

    def at(lam, beta):
        if (lam, beta) not in tried and not hides(lam, beta):
            tried[lam, beta] = None
        if (lam, beta) not in tried:
            got, lean_s = settle(order, lam, beta)
            tried[lam, beta] = got
            if lean_s is not None:
                leans.append(lean_s)
            if got is not None:
                found.append(Candidate(f"{variant}+swap", got))
        return tried[lam, beta]

    def score(got):
        return rank(got) if got is not None else (math.inf,)

    probes = [(lams[-1], 1.0), (lams[-1], 0.5)]
    for lam, beta in probes:
        at(lam, beta)
    best_probe = min(probes, key=lambda pt: score(tried[pt]))
    if tried[best_probe] is None or (ev is not None and rank(ev) <= rank(tried[best_probe])):
        return found, leans
    beta = best_probe[1]
    best_lam = min(lams, key=lambda lam: score(at(lam, beta)))
    for b in BETA_GRID:
        at(best_lam, b)
    return found, leans


def order_of(setting: Setting, name: str, num_devices: int, partition: Partition, virtual_stages: int,
             per_op: bool = True, **kw) -> _Order:
    """Generator `name`'s order for the family's partition, stage 0's backward joined where its
    W follows its I (schedules.generators.join); `per_op`: op sets, else whole units or nothing."""
    extra = dict(kw)
    if virtual_stages > 1 and name in _CHUNK_ARG:
        extra["virtual_stages"] = virtual_stages
    sched = join_first_stage_backward(generate(name, num_devices, setting.num_microbatches, **extra))
    if sched.num_stages != len(partition):
        raise ScheduleError(f"{name} builds {sched.num_stages} stages, the partition has {len(partition)}")
    return _Order(setting, name, sched, partition, compute_rows(sched), virtual_stages, per_op)


_CHUNK_ARG = ("interleaved", "obscura-interleaved", "interleaved-zb", "obscura-interleaved-zb", "looped-bfs")


def chosen_costs(setting: Setting, ev: Evaluation) -> StageCosts:
    return setting.costs(ev.config.partition, ev.config.recompute)


def transformed(setting: Setting, obscura: str, base: str, order: _Order, ev: Evaluation, swap: bool
                ) -> tuple[list[Candidate], list[Evaluation]]:
    """Obscura's transformation on the family's order (generator `obscura`, which
    relaxes generator `base`'s order), generated under `ev`'s sets, its recomputing
    stages adjusted, each device capped at the blocks the base order holds there (the
    relaxation fills bubbles without holding more; the search over caps, migration
    included, is Obscura's own search on 1F1B), then searched like any order."""
    adjusted = tuple(s for s, r in enumerate(ev.config.recompute) if r)
    if not adjusted:
        return [], []
    p = order.base.num_devices
    kw = {"virtual_stages": order.virtual_stages} if order.virtual_stages > 1 and base in _CHUNK_ARG else {}
    caps = held_blocks(compute_rows(generate(base, p, setting.num_microbatches, **kw)))
    try:
        new = order_of(setting, obscura, p, order.partition, order.virtual_stages, order.per_op, adjusted=adjusted,
                       costs=chosen_costs(setting, ev), warmup=caps)
    except ScheduleError:
        return [], []
    return search_order(new, "obscura", swap)


def needs_of(evaluations) -> float:
    return min((max(ev.peaks) for ev in evaluations), default=math.inf)


def at_limit(setting: Setting, generator: str, num_devices: int, partition: Partition, swap: bool,
             per_op: bool = True, rounds: int = 2) -> tuple[list[Candidate], list[Evaluation], Evaluation]:
    """A family whose order is made for the limit (the zero-bubble heuristic): from
    each seed (nothing recomputed; each stage's cheap sets, up to CHEAP of its step
    time; each stage's leanest), the order under the seed's costs with each device
    given its room after its weights and working set, then the sets chosen again on
    that order; `rounds` times, or until the sets stay. Also the order with no limit
    (its fastest)."""
    prof = setting.profile
    n = len(partition)
    found: list[Candidate] = []
    leans: list[Evaluation] = []
    none = (frozenset(),) * n
    grid = "quick" if num_devices * setting.num_microbatches > QUICK_ABOVE else "full"
    free = order_of(setting, generator, num_devices, partition, 1, memory_limit=_NO_LIMIT, grid=grid,
                    costs=setting.costs(partition, none))
    fast = unlimited(free)
    for seed in _seeds(setting, partition, per_op):
        sets = seed
        for _ in range(rounds):
            costs = setting.costs(partition, sets)
            room = tuple(max(setting.memory_limit - weight_bytes(prof, u) - working_bytes(prof, u, r), 0.0)
                         for u, r in zip(partition, sets))
            adjusted = tuple(s for s in range(n) if sets[s]) or None
            try:
                order = order_of(setting, generator, num_devices, partition, 1, per_op, memory_limit=room,
                                 costs=costs, adjusted=adjusted, grid=grid)
            except ScheduleError:     # not even one block and its I fit under these sets
                break
            more, more_leans = search_order(order, "at the limit", False)   # its order already holds W for the limit
            found += more
            leans += more_leans
            best = best_of(more)
            if best is None or tuple(best.evaluation.config.recompute) == sets:
                break
            sets = tuple(best.evaluation.config.recompute)
    return found, leans, fast


QUICK_ABOVE = 2048   # devices x micro-batches beyond which the heuristic runs its quick grid (one run)
CHEAP = 0.02   # a seed's "cheap" sets recompute at most this share of the stage's forward + backward


def _seeds(setting: Setting, partition: Partition, per_op: bool) -> list[tuple[frozenset, ...]]:
    """Recompute sets to make the heuristic's order under: none, cheap, leanest."""
    prof = setting.profile
    traced = setting.unit_kept is not None
    opts = [tuple(o for o in stage_options(prof, u, traced) if per_op or o.recompute in _WHOLE) for u in partition]
    costs = stage_costs(prof, partition, [frozenset()] * len(partition))
    cheap = tuple(min((o for o in opt if o.time <= CHEAP * (costs.fwd[s] + costs.bwd[s])),
                      key=lambda o: (o.kept, o.time)).recompute for s, opt in enumerate(opts))
    lean = tuple(min(opt, key=lambda o: (o.kept, o.work, o.time)).recompute for opt in opts)
    out = []
    for seed in ((frozenset(),) * len(partition), cheap, lean):
        if seed not in out:
            out.append(seed)
    return out
