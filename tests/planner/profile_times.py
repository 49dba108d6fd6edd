"""A measured profile with its times replaced by fixed ones, for tests that plan from
the bytes `obscura profile` measures on this CPU: the bytes are the engine's whatever
the load, the times are not. On a busy machine (make test-busy, 2026-12-04) measured op
times of 0 let a baseline recompute for free and reach Obscura's memory floor, so no
limit was left where only adjusted stages fit. Fixed times: every op and unit costs
something, more for more bytes, the same on every machine."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from planner.profile import OpProfile, Profile, load_profile, save_profile

BYTE_TIME = 1e-10       # seconds per byte of an op's output
OP_TIME = 1e-5          # seconds an op costs besides
BANDWIDTH = 1e10        # bytes/s, host and neighbour links
LATENCY = 1e-5          # seconds a neighbour transfer costs besides


def with_fixed_times(prof: Profile) -> Profile:
    """`prof` with op fwd = OP_TIME + BYTE_TIME x act_bytes, unit fwd = OP_TIME + its ops',
    bwd = 2 fwd (I and W half each where measured), full recompute = fwd, the layer
    recompute = one attn and one mlp unit's fwd, BANDWIDTH on both links, LATENCY."""
    units = []
    for kind, u in prof.units:
        ops = tuple((n, OpProfile(OP_TIME + BYTE_TIME * o.act_bytes, o.act_bytes)) for n, o in u.ops)
        fwd = OP_TIME + sum(o.fwd_time for _, o in ops)
        measured_or_none = lambda value: None if value is None else fwd  # noqa: E731
        units.append((kind, replace(u, fwd_time=fwd, bwd_time=2 * fwd, ops=ops,
                                    full_recompute_time=measured_or_none(u.full_recompute_time),
                                    input_grad_time=measured_or_none(u.input_grad_time),
                                    weight_grad_time=measured_or_none(u.weight_grad_time))))
    fwd_of = {k: u.fwd_time for k, u in units}
    layer = None if prof.layer_recompute_time is None else fwd_of.get("attn", 0.0) + fwd_of.get("mlp", 0.0)
    return replace(prof, units=tuple(units), host_bandwidth=BANDWIDTH, p2p_bandwidth=BANDWIDTH,
                   p2p_latency=LATENCY, layer_recompute_time=layer)


def fixed_times_file(measured: Path, out: Path) -> tuple[Path, Profile]:
    """The profile at `measured`, its times fixed, written to `out`; (out, profile)."""
    prof = with_fixed_times(load_profile(measured))
    save_profile(prof, out)
    return out, load_profile(out)
