"""The Obscura transformation on today's schedules: obscura-interleaved (on Megatron's
interleaved 1F1B), obscura-interleaved-zb (on torch's interleaved zero bubble) and
obscura-zb-h1 (on zb-h1-capped).

obscura-zb-h1 sits on the capped ZB-H1, not on the paper's: the caps below count
the blocks a device holds until their W (caps.held_peaks), and the capped variant
holds 1F1B's p-s on stage s, the per-stage memory envelope Obscura plans in and
compares against (Recomp-K). On the paper's ZB-H1 every stage holds up to p blocks
until their W, so "never fuller than the base" would let every stage hold p.

Start from the base schedule with recompute on the adjusted stages (its Recomp-K:
the same order, whose adjusted backwards run longer). Devices that host no adjusted
stage keep the base order. Each device that does runs the dependency relaxation of
device_relax.DeviceRelaxation under the generator's cost model: whenever it is free it
runs the first action of the base row whose inputs are there, so a later forward or
a W fills the bubble before a backward whose gradient is late, and that backward
moves right; a forward starts only while the device holds fewer than its cap c_d
blocks (stage, micro-batch: forwarded, not yet freed by W or B).

Migration caps: by default c_d starts at what the base schedule holds on device d,
so the result never holds more micro-batches than the base with Recomp-K (its
adjusted stages also keep fewer bytes per micro-batch); then devices from the last
one hosting an adjusted stage down to the first get, in turn, the smallest cap
bisection finds that keeps the makespan at most that of the relaxed order with the
base's caps. If relaxation cannot match the base's makespan under the costs, the
base order is kept (never slower). `migrate=True` also tries caps starting higher,
at the base's plus the 2(D-1-d) forward slots of 1F1B's forward bubble (device d
of D): forwards then migrate into the bubbles as in Obscura on 1F1B, holding more
(cheaper, recomputed) micro-batches; both starts are searched and the faster result
kept, so migration is never slower than without. `warmup` (a per-device tuple)
fixes the caps. Swapping
(lambda blocks per device, fraction beta) is swap.py's pass, added last.

Without `costs` the model is uniform f=1, b=2, r=1 per stage (per chunk for
interleaved: f=1/V, b=2/V, r=1/V, so a device's work per micro-batch stays 3+r).

p=4, m=8, f=1, b=2 (I=W=1), r=1 (R = recompute part of an I), obscura-zb-h1
adjusted=1 keeps ZB-H1's order here (37, as ZB-H1 with Recomp-1: a stage at its
cap can only wait); with migrate=True stages 0 and 1 hold 5 and the makespan is 35:

    stage 0 |FFFFF...RIWRIWFRIWFRIWFRIWRIWRIWRIW|
            |01234   0-01-152-263-374-45-56-67-7|
    stage 1 |.FFFFFRIWRIWRIWFRIWFRIWFRIWRIWRIW..|
            | 012340-01-12-253-364-475-56-67-7  |
    stage 2 |..FF.IWFIWFIWFIWFIW.FIW.FIWIW......|
            |  01 00211322433544 655 76677      |
    stage 3 |...FIWFIWFIWFIWFIWFIWFIW.FIW.......|
            |   000111222333444555666 777       |
"""
from __future__ import annotations

from dataclasses import replace

from schedules.costs import StageCosts
from schedules.errors import ScheduleError
from schedules.generators.caps import bisect_caps, held_peaks as held_rows_peaks
from schedules.generators.common import assemble, assemble_devices, check_warmup, setup
from schedules.generators.interleaved import interleaved
from schedules.generators.interleaved_zb import interleaved_zb
from schedules.generators.device_relax import DeviceRelaxation
from schedules.generators.swap import add_swaps, resolve_swap_blocks, swap_intent
from schedules.generators.zero_bubble import zb_h1_capped
from schedules.ir import Schedule
from schedules.simulator import makespan

_TOL = 1e-9


def held_peaks(schedule: Schedule) -> tuple[int, ...]:
    """Blocks each device holds at most along its row (caps.held_peaks)."""
    return held_rows_peaks(schedule.rows)


def migration_bounds(base: Schedule, migrate: bool) -> tuple[int, ...]:
    """Upper bound of each device's cap: what the base holds, plus, with `migrate`,
    the 2(D-1-d) forward slots of 1F1B's forward bubble on device d of D (Obscura's
    migration on 1F1B; the strawman's 3(p-s-1)+1), at most all the device's blocks."""
    held = held_peaks(base)
    if not migrate:
        return held
    n = base.num_devices
    m = base.num_microbatches
    return tuple(min(h + 2 * (n - 1 - d), m * len(base.stages_on(d))) for d, h in enumerate(held))


def obscura_transform(base: Schedule, costs: StageCosts, name: str, caps=None, migrate: bool = False,
                      swapping: tuple[int, ...] = (), swap_fraction: float = 0.0) -> tuple[list[list], float]:
    """Rows of the transformed order and their makespan under `costs` (see the
    module docstring); `base` holds compute actions only. `swapping`: the devices
    that will swap (at `swap_fraction`), whose stages' links the relaxation prices
    as shared."""
    if costs.num_stages != base.num_stages:
        raise ScheduleError(f"costs describe {costs.num_stages} stages, the schedule has {base.num_stages}")
    if swapping:
        base = replace(base, stages=tuple(
            replace(spec, swap_fraction=swap_fraction, swap_blocks=1) if base.stage_to_device[s] in swapping else spec
            for s, spec in enumerate(base.stages)))
    base_rows = [list(r) for r in base.rows]
    t_base = makespan(base, costs)
    relaxed = sorted({base.stage_to_device[s] for s in base.adjusted_stages})
    if not relaxed:
        return base_rows, t_base
    upper = migration_bounds(base, migrate)
    relax = DeviceRelaxation(base, costs)
    if caps is not None:
        caps = check_warmup(caps, base.num_devices)      # one cap per device
        found = relax({d: caps[d] for d in relaxed})
        if found is None:
            raise ScheduleError(f"{name}: caps {caps!r} deadlock (a device cannot run the forwards its "
                                f"neighbours wait for)")
        return found
    # from the base's caps, and (migrate) from the higher bounds: the faster result,
    # ties to the first (fewer micro-batches held)
    best = None
    for bound in ((held_peaks(base), upper) if migrate else (upper,)):
        found = _smallest_caps(relax, {d: bound[d] for d in relaxed}, t_base)
        if found is not None and (best is None or found[1] < best[1] * (1 - _TOL)):
            best = found
    return best if best is not None else (base_rows, t_base)


def _smallest_caps(relax: DeviceRelaxation, cap: dict[int, int], t_base: float):
    """Relax under `cap`; if that keeps the base's makespan, bisect each device's cap
    (last device first) down to the smallest that keeps the relaxed makespan
    (caps.bisect_caps). None if relaxing under `cap` is slower than the base (or
    deadlocks)."""
    found = relax(cap)
    if found is None or found[1] > t_base * (1 + _TOL):
        return None
    _, found = bisect_caps(relax, cap, {}, found, found[1] * (1 + _TOL))
    return found


def _uniform(num_stages: int, per_device: int) -> StageCosts:
    return StageCosts.uniform(num_stages, 1.0 / per_device, 2.0 / per_device, 1.0 / per_device)


def obscura_zb_h1(num_stages: int, num_microbatches: int, *, adjusted="all", recompute=("full",),
                  swap_blocks=0, swap_fraction: float = 0.0, warmup=None, migrate: bool = False,
                  costs: StageCosts | None = None) -> Schedule:
    st = setup(num_stages, num_microbatches, adjusted, recompute, warmup=warmup, adjusted_default="all")
    p, m = st.num_devices, st.num_microbatches
    base = zb_h1_capped(p, m, adjusted=st.adjusted, recompute=st.recompute)
    adj = base.adjusted_stages
    rows, _ = obscura_transform(base, costs if costs is not None else _uniform(p, 1), "obscura-zb-h1", st.warmup,
                                migrate, swap_intent(swap_blocks, swap_fraction, adj), swap_fraction)
    lam = resolve_swap_blocks(swap_blocks, swap_fraction, rows, adj)
    return assemble("obscura-zb-h1", m, add_swaps(rows, lam), adj, base.stages[adj[0]].recompute if adj else (),
                    lam, swap_fraction)


def obscura_interleaved(num_stages: int, num_microbatches: int, *, virtual_stages: int = 2, adjusted="all",
                        recompute=("full",), swap_blocks=0, swap_fraction: float = 0.0, warmup=None,
                        migrate: bool = False, costs: StageCosts | None = None) -> Schedule:
    return _on_chunked("obscura-interleaved", interleaved, num_stages, num_microbatches, virtual_stages,
                       adjusted, recompute, swap_blocks, swap_fraction, warmup, migrate, costs)


def obscura_interleaved_zb(num_stages: int, num_microbatches: int, *, virtual_stages: int = 2, adjusted="all",
                           recompute=("full",), swap_blocks=0, swap_fraction: float = 0.0, warmup=None,
                           migrate: bool = False, costs: StageCosts | None = None) -> Schedule:
    return _on_chunked("obscura-interleaved-zb", interleaved_zb, num_stages, num_microbatches, virtual_stages,
                       adjusted, recompute, swap_blocks, swap_fraction, warmup, migrate, costs)


def _on_chunked(name: str, generator, num_stages: int, num_microbatches: int, virtual_stages: int, adjusted,
                recompute, swap_blocks, swap_fraction: float, warmup, migrate: bool,
                costs: StageCosts | None) -> Schedule:
    """Obscura's transformation on a chunked order (V model stages per device)."""
    st = setup(num_stages, num_microbatches, adjusted, recompute, stages_per_device=virtual_stages, warmup=warmup,
               adjusted_default="all")
    p, m, v = st.num_devices, st.num_microbatches, virtual_stages
    base = generator(p, m, virtual_stages=v, adjusted=st.adjusted, recompute=st.recompute)
    adj = base.adjusted_stages
    where = base.stage_to_device
    rows, _ = obscura_transform(base, costs if costs is not None else _uniform(p * v, v), name, st.warmup, migrate,
                                swap_intent(swap_blocks, swap_fraction, sorted({where[s] for s in adj})),
                                swap_fraction)
    lam = resolve_swap_blocks(swap_blocks, swap_fraction, rows, sorted({where[s] for s in adj}))
    rec = base.stages[adj[0]].recompute if adj else ()
    return assemble_devices(name, m, add_swaps(rows, lam), where, adj, rec, swap_fraction)
