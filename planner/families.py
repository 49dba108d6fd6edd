"""The schedule family a plan runs on, chosen with Obscura's settings.

Families: 1F1B (Obscura's own search, planner.search), interleaved 1F1B with V
model chunks per device, and ZB-H1 (the split backward: I, then W into the
bubbles). On each, the planner simulates

    plain       the family's order, one recompute set on every stage (none, the
                family's CMB set, or full): interleaved + full recompute and
                zb-h1 + full recompute are the baselines it reports
    Obscura on  obscura-interleaved / obscura-zb-h1 (schedules.generators.obscura_on,
                generated under the profile's costs): the adjusted stages,
                per-op recompute sets and swaps that the 1F1B search chose. ZB-H1
                keeps them as they are (stage s is device s, its partition too);
                interleaved carries device d's set to each of its chunks, on the
                even partition into p * V chunks, without swapping (and, as a
                fallback, with full recompute on the other devices' chunks, or on
                every chunk; ZB-H1 likewise, without swaps, with full recompute on
                its adjusted stages or on every stage)

and keeps the fastest that fits (`choose`). Every candidate is judged by the same
simulator, costs (planner.costs) and memory accounting (schedules.memory), per
DEVICE: a device's peak is its chunks' weights + its held activations and inbox +
the largest rematerialisation working set among its chunks.

V in {2, 4} is offered when every chunk gets at least one layer (p * V <= L):
chunks follow models.even_partition over the 2L+2 units, so they balance to within
a unit even where p * V does not divide L (28B: 88 layers, p = 8).
"""
from __future__ import annotations

from dataclasses import replace
from typing import Mapping

import models
from planner.costs import Partition, check_partition, stage_costs, working_bytes
from planner.identify import cmb_set
from planner.profile import FULL, Profile
from planner.search import Config, Evaluation, Setting, rank, recompute_names
from schedules import Schedule, ScheduleError, generate
from schedules.generators import CHUNKED
from schedules.simulator import held_peaks

FAMILIES = ("1f1b", "interleaved", "zb-h1")
VIRTUAL = (2, 4)
_FAMILY_OF = {"gpipe": "gpipe", "1f1b": "1f1b", "recomp": "1f1b", "strawman": "1f1b", "obscura": "1f1b",
              "interleaved": "interleaved", "obscura-interleaved": "interleaved", "zb-h1": "zb-h1",
              "zb-h1-capped": "zb-h1", "obscura-zb-h1": "zb-h1", "zb-v": "zb-v",
              "interleaved-zb": "interleaved-zb", "obscura-interleaved-zb": "interleaved-zb",
              "looped-bfs": "looped-bfs"}
FAMILY_BASELINES = ("interleaved_full", "zb_h1_full")


def family_of(schedule: str) -> str:
    """The base family of a generator name (obscura -> 1f1b, obscura-zb-h1 -> zb-h1)."""
    return _FAMILY_OF.get(schedule, schedule)


def virtual_options(profile: Profile, num_devices: int) -> tuple[int, ...]:
    """The chunk counts V offered: every chunk gets at least one layer."""
    return tuple(v for v in VIRTUAL if num_devices * v <= profile.num_layers)


def chunk_partition(profile: Profile, num_devices: int, virtual_stages: int) -> Partition:
    return check_partition(models.even_partition(profile.num_units, num_devices * virtual_stages),
                           profile.num_units)


def family_schedule(setting: Setting, config: Config) -> tuple[Schedule, object]:
    """(Schedule, StageCosts) of a family configuration: the generator's order (under
    the profile's costs for Obscura on a family), every stage's recompute set."""
    prof, m, v = setting.profile, setting.num_microbatches, config.virtual_stages
    n = len(config.partition)
    costs = stage_costs(prof, config.partition, config.recompute, unit_kept=setting.unit_kept)
    kw: dict = {"adjusted": tuple(config.adjusted) or None, "recompute": ("full",)}
    if any(config.swap_blocks):
        kw.update(swap_blocks=tuple(config.swap_blocks), swap_fraction=config.beta)
    if config.schedule in CHUNKED:
        kw["virtual_stages"] = v
    if config.schedule.startswith("obscura-"):
        kw["costs"] = costs
    sched = generate(config.schedule, n // v, m, **kw)
    stages = tuple(replace(spec, recompute=recompute_names(config.recompute[s], setting.op_order))
                   for s, spec in enumerate(sched.stages))
    return replace(sched, stages=stages), costs


def simulate_family(setting: Setting, config: Config) -> Evaluation:
    """Simulate one family configuration; peaks are per device (see above)."""
    sched, costs = family_schedule(setting, config)
    makespan, act = held_peaks(sched, costs, check=False)   # generate() validated it
    devices = range(sched.num_devices)
    per_stage = [working_bytes(setting.profile, u, r) for u, r in zip(config.partition, config.recompute)]
    work = tuple(max(per_stage[s] for s in sched.stages_on(d)) for d in devices)
    weights = [sum(costs.weight_bytes[s] for s in sched.stages_on(d)) for d in devices]
    peaks = tuple(weights[d] + act[d] + work[d] for d in devices)
    return Evaluation(config, sched, costs, makespan, act, work, peaks, setting.memory_limit)


def _uniform(name: str, partition: Partition, r: frozenset, v: int = 1) -> Config:
    n = len(partition)
    return Config(name, partition, tuple(range(n)) if r else (), (r,) * n, (0,) * n, virtual_stages=v)


def baseline_configs(setting: Setting, even: Partition) -> dict[str, Config]:
    """interleaved (the smallest V offered) + full recompute, zb-h1 + full recompute."""
    full = frozenset({FULL})
    out = {}
    vs = virtual_options(setting.profile, len(even))
    if vs:
        out["interleaved_full"] = _uniform("interleaved", chunk_partition(setting.profile, len(even), vs[0]),
                                           full, vs[0])
    out["zb_h1_full"] = _uniform("zb-h1", even, full)
    return out


def candidates(setting: Setting, even: Partition, searched: Evaluation | None) -> dict[str, Config]:
    """Every family configuration the planner simulates besides the 1F1B search
    (`searched`: its best; None when it found nothing)."""
    prof, p = setting.profile, len(even)
    sets = {"none": frozenset(), "cmb": cmb_set(prof), "full": frozenset({FULL})}
    out: dict[str, Config] = {}
    base = searched.config if searched is not None and searched.config.schedule == "obscura" else None
    k = max(base.adjusted, default=-1) if base is not None else -1
    for v in virtual_options(prof, p):
        part = chunk_partition(prof, p, v)
        n = p * v
        for label, r in sets.items():
            if label != "cmb" or r:
                out[f"interleaved_v{v}_{label}"] = _uniform("interleaved", part, r, v)
        if k >= 0:
            adj = tuple(s for s in range(n) if s % p <= k)
            rec = tuple(base.recompute[s % p] for s in range(n))
            out[f"obscura_interleaved_v{v}"] = Config("obscura-interleaved", part, adj, rec, (0,) * n,
                                                      virtual_stages=v)
            # chunks hold more than 1F1B's stages: the other devices recompute fully too
            every = tuple(rec[s] if s in adj else frozenset({FULL}) for s in range(n))
            out[f"obscura_interleaved_v{v}_rest_full"] = Config("obscura-interleaved", part, tuple(range(n)),
                                                                every, (0,) * n, virtual_stages=v)
        out[f"obscura_interleaved_v{v}_all_full"] = Config("obscura-interleaved", part, tuple(range(n)),
                                                           (frozenset({FULL}),) * n, (0,) * n, virtual_stages=v)
    for label, r in sets.items():
        if label != "cmb" or r:
            out[f"zb_h1_{label}"] = _uniform("zb-h1", even, r)
    if k >= 0:
        out["obscura_zb_h1"] = replace(base, schedule="obscura-zb-h1", order=None)
        full = tuple(frozenset({FULL}) if s in base.adjusted else base.recompute[s] for s in range(p))
        out["obscura_zb_h1_full"] = replace(base, schedule="obscura-zb-h1", order=None, recompute=full,
                                            swap_blocks=(0,) * p, beta=0.0)
    out["obscura_zb_h1_all_full"] = Config("obscura-zb-h1", even, tuple(range(p)), (frozenset({FULL}),) * p,
                                           (0,) * p)
    return out


def choose(setting: Setting, even: Partition, best: Evaluation, searched: Evaluation | None,
           known: Mapping[str, Evaluation] | None = None) -> tuple[Evaluation, str | None, dict[str, Evaluation]]:
    """(the fastest fitting of `best` and every family candidate, the candidate's
    name or None when `best` stays, every candidate's evaluation). `known`:
    evaluations already made under `setting` (the family baselines); a config met
    twice (e.g. Obscura on a family with every stage adjusted and fully recomputing
    is also its `_all_full` candidate) is simulated once."""
    done: dict[Config, Evaluation | None] = {ev.config: ev for ev in (known or {}).values()}
    evals = {}
    for name, cfg in candidates(setting, even, searched).items():
        if cfg not in done:
            try:
                done[cfg] = simulate_family(setting, cfg)
            except ScheduleError:   # e.g. the 1F1B search's swaps exceed the family's warm-up
                done[cfg] = None
        if done[cfg] is not None:
            evals[name] = done[cfg]
    winner, source = best, None
    for name, ev in evals.items():
        if ev.fits and (not winner.fits or rank(ev) < rank(winner)):
            winner, source = ev, name
    return winner, source, evals


def zoo_systems(result) -> dict[str, Evaluation]:
    """The systems a plan search (planner.plan.PlanResult, families on) compares:
    DAPPLE+, interleaved / zb-h1 with full recompute, Obscura (the 1F1B search),
    Obscura on interleaved and on zb-h1 (the fastest fitting candidate of each; the
    least memory when none fits) and the planner's pick."""
    out = {name: result.baselines[name] for name in ("dapple_plus", *FAMILY_BASELINES) if name in result.baselines}
    if result.searched is not None:
        out["obscura"] = result.searched
    for system, prefix in (("obscura_interleaved", "obscura_interleaved"), ("obscura_zb_h1", "obscura_zb_h1")):
        evs = [ev for name, ev in result.families.items() if name.startswith(prefix)]
        fitting = [ev for ev in evs if ev.fits]
        if fitting or evs:
            out[system] = min(fitting, key=rank) if fitting else min(evs, key=lambda ev: max(ev.peaks))
    out["pick"] = result.best
    return out
