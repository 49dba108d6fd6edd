"""The bridge from a profile to the simulator: per-stage sums over unit ranges.

A partition is a tuple of half-open unit ranges ((0, 23), (23, 45), ...) that
covers the 2L+2 units contiguously. `stage_costs` is the only place where profile
numbers become a `StageCosts`, so the planner's models and the simulator always
see the same stage.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Iterable, Sequence

from planner.errors import PlanError
from planner.profile import FULL, LAYER, Profile
from planner.recompute.residuals import UnitKept
from schedules.costs import StageCosts

Partition = tuple[tuple[int, int], ...]


def check_partition(partition: Sequence[Sequence[int]], num_units: int) -> Partition:
    """Validated, normalised copy: contiguous, non-empty ranges covering all units."""
    part = tuple((int(a), int(b)) for a, b in partition)
    if not part:
        raise PlanError("a partition needs at least one stage")
    pos = 0
    for s, (a, b) in enumerate(part):
        if a != pos:
            raise PlanError(f"stage {s} starts at unit {a}, expected {pos} (ranges must be contiguous)")
        if b <= a:
            raise PlanError(f"stage {s} has an empty unit range [{a}, {b})")
        pos = b
    if pos != num_units:
        raise PlanError(f"partition ends at unit {pos}, the model has {num_units} units")
    return part


@dataclass(frozen=True)
class StageView:
    """One stage of a partitioned profile: sums over its units."""
    units: tuple[int, int]
    kinds: tuple[str, ...]          # kind of each unit in the range
    fwd: float
    bwd: float
    weight_bytes: float             # params + grads + optimizer state, plus XLA scratch (scratch_bytes)
    input_bytes: float              # kept whatever is recomputed
    op_time: tuple[tuple[str, float], ...]   # per op name: summed fwd_time over units
    op_bytes: tuple[tuple[str, float], ...]  # per op name: summed act_bytes over units
    boundary_bytes: float           # sent to the next stage per micro-batch (0 on the last)
    scratch_bytes: float = 0.0      # XLA scratch: the sum of its units' (stage_scratch: an upper bound)

    @property
    def op_names(self) -> tuple[str, ...]:
        return tuple(n for n, _ in self.op_time)


def _stage_view(profile: Profile, units: tuple[int, int], next_start: int | None) -> StageView:
    kinds = profile.kinds[units[0]:units[1]]
    time: dict[str, float] = {}
    size: dict[str, float] = {}
    fwd = bwd = weight = inputs = 0.0
    for kind in kinds:
        u = profile.unit(kind)
        fwd += u.fwd_time
        bwd += u.bwd_time
        weight += u.weight_bytes
        inputs += u.input_bytes
        for name, op in u.ops:
            time[name] = time.get(name, 0.0) + op.fwd_time
            size[name] = size.get(name, 0.0) + op.act_bytes
    boundary = 0.0 if next_start is None else profile.unit(profile.kinds[next_start]).input_bytes
    scratch = stage_scratch(profile, units)
    return StageView(units, kinds, fwd, bwd, weight + scratch, inputs, tuple(time.items()),
                     tuple(size.items()), boundary, scratch)


@lru_cache(maxsize=4096)
def _views(profile: Profile, partition: Partition) -> tuple[StageView, ...]:
    return tuple(_stage_view(profile, r, partition[s + 1][0] if s + 1 < len(partition) else None)
                 for s, r in enumerate(partition))


def stage_views(profile: Profile, partition: Sequence[Sequence[int]]) -> tuple[StageView, ...]:
    return _views(profile, check_partition(partition, profile.num_units))


def stage_scratch(profile: Profile, units: tuple[int, int]) -> float:
    """XLA scratch a stage over `units` may need while its programs run: the sum of
    its units' (0 for a profile without scratch_bytes). An upper bound, so that a
    plan's limit holds on the device: XLA reuses some temp buffers between the units
    of one program, but not enough for the largest unit alone to cover them
    (llama2-tiny, seq 64, CPU: one layer's units 0.59 + 0.59 MB, the two in one
    program 0.82 MB; four units 1.32 MB against a sum of 2.36 MB)."""
    return sum(profile.unit(k).scratch for k in profile.kinds[units[0]:units[1]])


def weight_bytes(profile: Profile, units: tuple[int, int]) -> float:
    """What a stage holds whatever it runs: params + grads + optimizer state of its
    units, and its XLA scratch (stage_scratch). The memory model adds activations."""
    return sum(profile.unit(k).weight_bytes for k in profile.kinds[units[0]:units[1]]) + stage_scratch(profile, units)


def kept_bytes(profile: Profile, units: tuple[int, int], recompute: Iterable[str],
               unit_kept: UnitKept | None = None, offload: Iterable[str] = ()) -> float:
    """Activation bytes one micro-batch leaves on the stage's DEVICE under recompute
    set R: the profile's additive figure, or the larger traced one when `unit_kept`
    (planner.recompute.residuals.exact_unit_kept) is given; the ops in `offload` that R does
    not recompute are kept in host memory instead (host_kept_bytes) and not counted."""
    return _kept_bytes(profile, tuple(units), frozenset(recompute), unit_kept, frozenset(offload))


@lru_cache(maxsize=1 << 16)
def _kept_bytes(profile: Profile, units: tuple[int, int], r: frozenset, unit_kept: UnitKept | None,
                offload: frozenset) -> float:
    # cached: a partition search asks the same stages under the same sets thousands of times
    if LAYER in r:
        return _layer_kept(profile, units, unit_kept)
    total = 0.0
    for k in profile.kinds[units[0]:units[1]]:
        b = profile.unit(k).kept_bytes(r)
        total += (max(b, unit_kept(k, r)) if unit_kept is not None else b) - _unit_host_bytes(profile, k, r, offload)
    return total


def host_kept_bytes(profile: Profile, units: tuple[int, int], recompute: Iterable[str],
                    offload: Iterable[str]) -> float:
    """Activation bytes one micro-batch keeps in HOST memory: the act_bytes of the
    offloaded ops that R does not recompute (a recomputed op is kept nowhere; under
    `full` or `layer` nothing is offloaded)."""
    r = frozenset(recompute)
    return sum(_unit_host_bytes(profile, k, r, offload) for k in profile.kinds[units[0]:units[1]])


def _unit_host_bytes(profile: Profile, kind: str, recompute: frozenset, offload: Iterable[str]) -> float:
    if FULL in recompute or LAYER in recompute:
        return 0.0
    host = frozenset(offload) - recompute
    return sum(op.act_bytes for name, op in profile.unit(kind).ops if name in host)


def offload_profile(profile: Profile, offload: Iterable[str]) -> Profile:
    """`profile` with the offloaded ops' act_bytes taken off the device (0), so that
    every kept-bytes figure derived from it (stage_costs, the planner's peaks) is
    device bytes: kept_bytes(offload_profile(P, O), u, R) == kept_bytes(P, u, R,
    offload=O) for every R (additive figures). What it does not count: an op of O
    that R recomputes is live on the device while its backward recomputes it (the
    working set, UnitProfile.recomputed_bytes, reads 0 for it here), and a backward
    brings its micro-batch's offloaded bytes back to the device while it runs;
    `obscura plan --offload` says how much that is per stage."""
    host = frozenset(offload)
    units = tuple((kind, replace(unit, ops=tuple((n, replace(op, act_bytes=0.0) if n in host else op)
                                                 for n, op in unit.ops)))
                  for kind, unit in profile.units)
    return replace(profile, units=units)


def _whole_layer_mlps(profile: Profile, units: tuple[int, int]) -> list[int]:
    """Indices of the mlp units whose attention partner (the unit before) is in the
    same range: each closes a whole layer that `layer` checkpoints as one."""
    kinds = profile.kinds
    return [i for i in range(units[0] + 1, units[1]) if kinds[i] == "mlp" and kinds[i - 1] == "attn"]


def _layer_kept(profile: Profile, units: tuple[int, int], unit_kept: UnitKept | None) -> float:
    """Under `layer`: every unit keeps its input as under `full`, except the mlp of
    a whole layer (its input lives inside the layer's checkpoint)."""
    inside = set(_whole_layer_mlps(profile, units))
    total = 0.0
    for i in range(units[0], units[1]):
        if i in inside:
            continue
        k = profile.kinds[i]
        b = profile.unit(k).kept_bytes({FULL})
        total += max(b, unit_kept(k, frozenset({FULL}))) if unit_kept is not None else b
    return total


def recompute_time(profile: Profile, units: tuple[int, int], recompute: Iterable[str]) -> float:
    r = frozenset(recompute)
    if LAYER in r:   # whole layers at the layer price, lone units (embed, head, split layers) as `full`
        whole = _whole_layer_mlps(profile, units)
        lone = [profile.kinds[i] for i in range(units[0], units[1])
                if i not in whole and i + 1 not in whole]
        return len(whole) * profile.layer_recompute + sum(profile.unit(k).full_recompute for k in lone)
    return sum(profile.unit(k).recompute_time(r) for k in profile.kinds[units[0]:units[1]])


def working_bytes(profile: Profile, units: tuple[int, int], recompute: Iterable[str]) -> float:
    """Extra bytes live while one micro-batch's backward rematerialises R: the
    stage recomputes unit by unit (each unit is its own checkpoint), so the largest
    single unit's recomputed activations, not their sum over the stage."""
    r = frozenset(recompute)
    if not r:
        return 0.0
    if LAYER in r:   # a whole layer rematerialised at once; lone units as under `full`
        full = working_bytes(profile, units, {FULL})
        if not _whole_layer_mlps(profile, units):
            return full
        return max(full, sum(profile.unit(k).recomputed_bytes({FULL}) for k in profile.layer_kinds))
    kinds = set(profile.kinds[units[0]:units[1]])
    return max(profile.unit(k).recomputed_bytes(r) for k in kinds)


def program_outputs(costs: StageCosts, stage: int, split: bool, for_w: float | None = None) -> float:
    """Bytes a stage's backward program allocates for its outputs while its inputs
    (the micro-batch's residuals) are still alive, which the memory fold, counting a
    block as one or the other, does not see: the input gradient it sends upstream,
    and, for a split backward's I, what it allocates for W: `for_w` where the profile
    measured it (input_grad_outputs; the rest of W's block are residual leaves W reads
    where the forward left them, or cotangents XLA wrote into residuals I took
    donated), else the whole block W will read. A device's peak adds the largest
    among its stages to its working set."""
    dx = costs.boundary_bytes[stage - 1] if stage > 0 else 0.0
    if not split:
        return dx
    if for_w is not None:
        return dx + for_w
    held = costs.weight_grad_held_bytes(stage)
    return dx + (held if held is not None else costs.act_bytes[stage] - costs.input_grad_frees(stage))


def input_grad_outputs(profile: Profile, units: tuple[int, int], weight_grad: str = "hold") -> float | None:
    """What a split backward's I allocates for its W beside the residuals over a
    stage's units, per micro-batch, for a W that holds its inputs: the profile's
    weight_grad_beside_bytes summed where every unit has it (what XLA could not write
    into the residual leaves I takes donated), else its weight_grad_made_bytes (all
    that I computes); None where a unit lacks both or W re-derives its inputs (its I
    then counts the whole block: program_outputs)."""
    if weight_grad != "hold":
        return None
    kinds = profile.kinds[units[0]:units[1]]
    for key in ("weight_grad_beside_bytes", "weight_grad_made_bytes"):
        found = [getattr(profile.unit(k), key) for k in kinds]
        if all(m is not None for m in found):
            return float(sum(found))
    return None


def stage_costs(profile: Profile, partition: Sequence[Sequence[int]],
                recompute_sets: Sequence[Iterable[str]], *,
                p2p_bandwidth: float | None = None, p2p_latency: float | None = None,
                host_bandwidth: float | None = None, unit_kept: UnitKept | None = None,
                weight_grad: str = "hold") -> StageCosts:
    """StageCosts for the simulator. `recompute_sets[s]` is stage s's recompute set
    (empty for none; it sets recompute / act_bytes_recompute, which the simulator
    uses on stages whose schedule row recomputes). Bandwidths default to the
    profile's; `unit_kept` corrects kept bytes where the additive formula is low;
    `weight_grad`: how a split backward's W gets its inputs (split_backward)."""
    views = stage_views(profile, partition)
    if len(recompute_sets) != len(views):
        raise PlanError(f"{len(recompute_sets)} recompute sets for {len(views)} stages")
    sets = [frozenset(r) for r in recompute_sets]
    return StageCosts(
        **split_backward(profile, views, weight_grad),
        fwd=tuple(v.fwd for v in views),
        bwd=tuple(v.bwd for v in views),
        recompute=tuple(recompute_time(profile, v.units, r) for v, r in zip(views, sets)),
        act_bytes=tuple(kept_bytes(profile, v.units, (), unit_kept) for v in views),
        act_bytes_recompute=tuple(kept_bytes(profile, v.units, r, unit_kept) for v, r in zip(views, sets)),
        weight_bytes=tuple(v.weight_bytes for v in views),
        boundary_bytes=tuple(v.boundary_bytes for v in views),
        p2p_latency=profile.p2p_latency if p2p_latency is None else p2p_latency,
        p2p_bandwidth=profile.p2p_bandwidth if p2p_bandwidth is None else p2p_bandwidth,
        host_bandwidth=profile.host_bandwidth if host_bandwidth is None else host_bandwidth,
    )


WEIGHT_GRAD_FIELDS = {"hold": ("weight_grad_time", "weight_grad_bytes"),
                      "rederive": ("weight_grad_rederive_time", "weight_grad_rederive_bytes")}


def split_backward(profile: Profile, views: Sequence[StageView], weight_grad: str = "hold") -> dict:
    """StageCosts' input_grad / weight_grad per stage, summed over its units, when
    every unit kind of the profile has measured I and W times; only weight_grad_held
    without them, when every unit has its W bytes (an analytic profile); {} with
    neither (the simulator then prices I = W = bwd / 2 and a W holding the block).
    weight_grad_held: what a W holds from its I is its units' (the same under any
    recompute set: W reads each weight matmul's input and output cotangent, kept or
    recomputed once in I). `weight_grad`: "hold", or "rederive" for a W that
    re-derives its inputs (`--weight-grad rederive`): its own time and bytes for the
    units that have them (the layers'; embed and head W hold as before), which a
    profile must have for some unit (I is the same)."""
    if weight_grad not in WEIGHT_GRAD_FIELDS:
        raise PlanError(f"weight_grad must be one of {', '.join(WEIGHT_GRAD_FIELDS)}, got {weight_grad!r}")
    units = [u for _, u in profile.units]
    fields = {}
    for kind, u in profile.units:
        rederived = (u.weight_grad_rederive_time, u.weight_grad_rederive_bytes)
        fields[kind] = rederived if weight_grad == "rederive" and None not in rederived else \
            (u.weight_grad_time, u.weight_grad_bytes)
    if weight_grad == "rederive" and all(fields[k] == (u.weight_grad_time, u.weight_grad_bytes)
                                         for k, u in profile.units):
        raise PlanError("the profile has no weight_grad_rederive_time / weight_grad_rederive_bytes (written by "
                        "`obscura profile` since --weight-grad rederive exists): profile the model again")
    out = {}
    if all(u.input_grad_time is not None and fields[k][0] is not None for k, u in profile.units):
        out["input_grad"] = tuple(sum(profile.unit(k).input_grad_time for k in v.kinds) for v in views)
        out["weight_grad"] = tuple(sum(fields[k][0] for k in v.kinds) for v in views)
    if all(fields[k][1] is not None for k, _ in profile.units) and units:
        out["weight_grad_held"] = tuple(sum(fields[k][1] for k in v.kinds) for v in views)
    return out


def move_unit(partition: Partition, src: int, dst: int) -> Partition:
    """Move one unit's worth of work from stage `src` to stage `dst` keeping the
    ranges contiguous: every boundary between them shifts by one unit towards src,
    so src loses a unit, dst gains one and the stages between keep their count."""
    if src == dst:
        raise PlanError("cannot move a unit from a stage to itself")
    if partition[src][1] - partition[src][0] < 2:
        raise PlanError(f"stage {src} has a single unit left")
    bounds = [b for _, b in partition[:-1]]  # bounds[i]: end of stage i = start of i+1
    if src < dst:
        for i in range(src, dst):
            bounds[i] -= 1
    else:
        for i in range(dst, src):
            bounds[i] += 1
    starts = [0] + bounds
    ends = bounds + [partition[-1][1]]
    return check_partition(tuple(zip(starts, ends)), partition[-1][1])
