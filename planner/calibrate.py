"""Per-op recompute times for a measured profile, from measured stage overheads.

Why: the first H200 profiles (results/h200/raw/) were taken with a profiler
revision that timed forward+backward as one XLA program, so XLA reused forward
values and every per-op recompute time came out ~0. The unit forward/backward
times and all byte counts in them are sound. The H200 stage benchmark
(results/h200/stage_mfu.json) measured, in the same device session, the real
fwd+bwd of a Llama-2-13B stage under the presets none / cmb / mlp / full at the
same seq_len and micro-batch; the differences to `none` ARE recompute costs, per
layer:

    d_cmb  = t(cmb)  - t(none)    norms + act + mul of attention and MLP
    d_mlp  = t(mlp)  - t(none)    every MLP op
    d_full = t(full) - t(none)    every op of attention and MLP

Calibration splits each measured group total over its ops in proportion to the
analytic roofline (planner.analytic) of the same model, counting only ops whose
output a backward can need (act_bytes > 0: an op nobody saves is never
recomputed, e.g. mlp_down, whose output only feeds the residual add):

    cmb ops of attn+mlp     <- max(d_cmb, 0)
    other mlp ops           <- max(d_mlp - (mlp's cmb share), 0)
    other attn ops          <- max(d_full - d_mlp - (attn's cmb share), 0)

Units the stage did not cover (embed, head), and models without their own stage
measurement (scale=...), keep the analytic split scaled to the unit's measured
forward by the measured ratio recompute/forward of the attn+mlp layer. Each
unit's `full_recompute_time` (the cost of the `full` preset) is the sum of its
calibrated op times, i.e. the measured d_full. The profile's device string says
"calibrated" and names the source, so nothing downstream can mistake these times
for direct per-op measurements.
"""
from __future__ import annotations

from dataclasses import replace

from planner.errors import ProfileError
from planner.profile import OpProfile, Profile, UnitProfile

CMB_FAMILY_OPS = {"attn_norm", "mlp_norm", "mlp_act", "mlp_mul"}


def stage_overheads(stage_mfu: dict, attention: str = "cudnn") -> dict[str, float]:
    """Per-layer recompute overhead (seconds) of cmb/mlp/full over none, from a
    scripts/bench_stage_mfu.py result."""
    rows = {r["policy"]: r for r in stage_mfu["rows"]
            if r.get("attention") == attention and "fwd_bwd_s" in r}
    missing = sorted({"none", "cmb", "mlp", "full"} - set(rows))
    if missing:
        raise ProfileError(f"stage MFU result lacks policies {', '.join(missing)} for {attention}")
    layers = rows["none"]["layers"]
    base = rows["none"]["fwd_bwd_s"]
    return {p: (rows[p]["fwd_bwd_s"] - base) / layers for p in ("cmb", "mlp", "full")}


def _split(total: float, ops: dict[str, OpProfile], names, weights: dict[str, float]) -> dict[str, float]:
    names = [n for n in names if n in ops and ops[n].act_bytes > 0]
    w = sum(weights[n] for n in names)
    if not names or w <= 0:
        return {}
    return {n: total * weights[n] / w for n in names}


def _scaled_unit(unit: UnitProfile, analytic: UnitProfile, ratio: float) -> UnitProfile:
    """Analytic split over recomputable ops, summing to ratio * measured forward."""
    ops = dict(unit.ops)
    weights = {n: o.fwd_time for n, o in analytic.ops}
    times = _split(ratio * unit.fwd_time, ops, list(ops), weights)
    return replace(unit, ops=tuple((n, OpProfile(times.get(n, 0.0), o.act_bytes)) for n, o in unit.ops),
                   full_recompute_time=sum(times.values()))


def calibrate_profile(measured: Profile, analytic: Profile, overheads: dict[str, float] | None = None,
                      ratios: dict[str, float] | None = None, source: str = "") -> Profile:
    """`measured` with per-op fwd_time replaced. Give `overheads` (from
    stage_overheads, same model shape) to calibrate attn/mlp exactly; or `ratios`
    {"attn": r, "mlp": r} (recompute/forward measured on a similar model)."""
    att, mlp = dict(measured.unit("attn").ops), dict(measured.unit("mlp").ops)
    a_att = {n: o.fwd_time for n, o in analytic.unit("attn").ops}
    a_mlp = {n: o.fwd_time for n, o in analytic.unit("mlp").ops}
    units = dict(measured.units)
    if overheads is not None:
        d_cmb = max(overheads["cmb"], 0.0)
        cmb_times = _split(d_cmb, {**att, **mlp}, [n for n in list(att) + list(mlp) if n in CMB_FAMILY_OPS],
                           {**a_att, **a_mlp})
        mlp_cmb = sum(t for n, t in cmb_times.items() if n in mlp)
        att_cmb = sum(t for n, t in cmb_times.items() if n in att)
        mlp_rest = _split(max(overheads["mlp"] - mlp_cmb, 0.0), mlp,
                          [n for n in mlp if n not in CMB_FAMILY_OPS], a_mlp)
        att_rest = _split(max(overheads["full"] - overheads["mlp"] - att_cmb, 0.0), att,
                          [n for n in att if n not in CMB_FAMILY_OPS], a_att)
        times = {**cmb_times, **mlp_rest, **att_rest}
        for kind, ops in (("attn", att), ("mlp", mlp)):
            u = measured.unit(kind)
            unit_times = [times.get(n, 0.0) for n, _ in u.ops]
            units[kind] = replace(u, ops=tuple((n, OpProfile(t, o.act_bytes))
                                               for t, (n, o) in zip(unit_times, u.ops)),
                                  full_recompute_time=sum(unit_times))
        layer_fwd = measured.unit("attn").fwd_time + measured.unit("mlp").fwd_time
        ratio = max(overheads["full"], 0.0) / layer_fwd
        ratios = {"attn": ratio, "mlp": ratio, "embed": ratio, "head": ratio, **(ratios or {})}
    if ratios is None:
        raise ValueError("calibrate_profile needs stage overheads or recompute/forward ratios")
    for kind in ("embed", "attn", "mlp", "head"):
        if overheads is not None and kind in ("attn", "mlp"):
            continue
        r = ratios.get(kind, ratios.get("head", 1.0)) if kind in ("embed", "head") else ratios[kind]
        units[kind] = _scaled_unit(measured.unit(kind), analytic.unit(kind), r)
    device = f"{measured.device} (per-op recompute calibrated{': ' + source if source else ''})"
    return replace(measured, device=device, units=tuple((k, units[k]) for k, _ in measured.units))


def layer_ratios(profile: Profile) -> dict[str, float]:
    """recompute('full' over recomputable ops) / forward, per unit kind."""
    return {k: sum(o.fwd_time for _, o in u.ops) / u.fwd_time for k, u in profile.units if u.fwd_time}
