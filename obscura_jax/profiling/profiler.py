"""Measure a profile (obscura-profile/1) on the current JAX device.

Per unit kind (embed, attn, mlp, head) the profiler has the caller's `time_unit`
time the engine's own stage program for a single unit (obscura_jax.observe.measure.
time_unit_program, passed in by `obscura profile`: the same jitted forward/backward
split, the same residuals; the planner never imports the engine) and measures:

- fwd_time, bwd_time: forward and backward with every named op saved (policy
  `none`), as `time_unit` times them (the engine's: steady state, the median of
  `reps` samples of back-to-back runs on random data);
- weight_bytes: params + grads (same shapes) + the optax adamw state;
- scratch_bytes: XLA's temp buffers of the unit's compiled programs (the largest
  of forward, backward, I and W: `time_unit`'s `temp_bytes`), which the planner
  counts on top of a stage's weights;
- input_bytes: the residual bytes when everything is recomputed (`full`): the
  unit's input (and the head's targets);
- per op, by telescoping in forward order: op i's act_bytes is how much the
  residual grows when it is saved in addition to ops 0..i-1 (the rest
  recomputed), and its fwd_time is how much the unit's backward shrinks then
  (the recompute that saving it avoids). Residuals are the leaves `jax.vjp`
  keeps in the real unit code (traced, models.info; the engine's program is
  checked to agree); times are the backward of the engine's program for the unit
  under each recompute set, timed by `time_unit` like the unit itself (steady
  state: one timing method for every number here). Sets with equal residuals
  run the same backward, so only sets that change the residuals are timed and
  an op that changes nothing is credited 0 (its time goes to the next op that
  does). The sums telescope: input_bytes + sum(act_bytes) is the residual with
  nothing recomputed, sum(fwd_time) the measured overhead of recomputing every
  offered op. A difference below zero (noise, or saving an op that makes an
  earlier one unneeded) is recorded as 0;
- layer_recompute_time (profile-wide): the layer-granular full recompute (policy
  `layer`, one checkpoint over attn + mlp keeping only the layer input), the
  backward of min(5, layers) layers under `layer` minus under `none`, per layer.

`ops` restricts the offered recompute choices: other ops are always saved, and
their bytes count as the unit's input_bytes (kept whatever is recomputed).
A split backward (zero-bubble style): when `time_unit`, asked with `split=True` for
the unit's own timing, also reports the unit's I and W (as
obscura_jax.observe.measure.time_unit_program does: the engine's I and W programs,
each timed alone over the same residuals), the unit records them as input_grad_time
/ weight_grad_time, weight_grad_bytes, what a W keeps from its I, and
weight_grad_made_bytes, the part of it I computes, and weight_grad_beside_bytes,
the part of that I allocates beside the residuals (not written into those it takes
donated); with the W that re-derives its
inputs also weight_grad_rederive_time / _bytes (`split_fields`).

Bandwidths: host <-> device and device <-> device are timed with jax.device_put
when the platform has a pinned-host memory / a second device; otherwise the
defaults below are written and `notes` says so.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Protocol, Sequence

import jax
import jax.numpy as jnp

import models
from models.info import check_sizes, unit_residuals
from planner.analytic import training_state_bytes
from planner.errors import ProfileError
from planner.profile import OpProfile, Profile, UnitProfile
from obscura_jax.profiling.stopwatch import median_time

DEFAULT_HOST_BANDWIDTH = 5.3e10   # H200 pinned host copies (measured on an H200: BENCHMARKS.md)
DEFAULT_P2P_BANDWIDTH = 2.0e11
DEFAULT_P2P_LATENCY = 1e-5


class UnitTiming(Protocol):
    """What `time_unit` reports for one unit's compiled program."""
    fwd: float
    bwd: float
    residual_bytes: int
    temp_bytes: int


# time_unit(cfg, unit_range, policy, device, params, x, targets, reps, split=False) -> UnitTiming;
# `split`: also time the split backward (the unit's own timing; `split_fields` reads it)
TimeUnit = Callable[..., UnitTiming]


@dataclass
class ProfileRun:
    profile: Profile
    notes: list[str] = field(default_factory=list)
    residuals: dict = field(default_factory=dict)   # (kind, saved prefix length) -> measured bytes
    seconds: float = 0.0


def _unit_range(cfg, kind: str) -> tuple[int, int]:
    return {"embed": (0, 1), "attn": (1, 2), "mlp": (2, 3), "block": (1, 2),
            "head": (cfg.num_units - 1, cfg.num_units)}[kind]


def _inputs(cfg, kind: str, seq_len: int, micro_batch: int, device):
    key = jax.random.key(1)
    tokens = jax.random.randint(key, (micro_batch, seq_len), 0, cfg.vocab_size, jnp.int32)
    targets = jax.random.randint(jax.random.fold_in(key, 1), (micro_batch, seq_len), 0, cfg.vocab_size,
                                 jnp.int32)
    hidden = jax.random.normal(jax.random.fold_in(key, 2), (micro_batch, seq_len, cfg.hidden),
                               jnp.dtype(cfg.compute_dtype))
    x = tokens if kind == "embed" else hidden
    put = lambda a: jax.device_put(a, device)  # noqa: E731
    return put(x), (put(targets) if kind == "head" else None)


def profile_model(cfg, seq_len: int, micro_batch: int, *, time_unit: TimeUnit, reps: int = 5,
                  ops: Sequence[str] | None = None, device=None, host_bandwidth: float | None = None,
                  p2p_bandwidth: float | None = None, p2p_latency: float | None = None,
                  progress: Callable[[str], None] | None = None) -> ProfileRun:
    """Measure `cfg` (a models.ModelConfig) at (seq_len, micro_batch) on `device`
    (default: the first JAX device); `time_unit` times one unit's engine program.
    Long: one pass per unit kind, kept together so the telescoping reads top-down."""
    check_sizes(cfg, seq_len, micro_batch)
    if cfg.tie_embeddings:
        raise ProfileError(f"{cfg.name} ties its embeddings: profile it with tie_embeddings=False")
    if isinstance(reps, bool) or not isinstance(reps, int) or reps < 1:
        raise ProfileError(f"--reps must be a positive integer, got {reps!r}")
    vocab = models.ops_for(cfg.family)
    offered = set(vocab) if ops is None else set(ops)
    unknown = sorted(offered - set(vocab))
    if unknown:
        raise ProfileError(f"unknown op(s) {', '.join(unknown)} for the {cfg.family} family "
                           f"(known: {', '.join(vocab)})")
    device = device or jax.devices()[0]
    say = progress or (lambda msg: None)
    run = ProfileRun(profile=None)  # type: ignore[arg-type]
    start = time.perf_counter()
    units = {}
    for kind in models.get_family(cfg.family).kinds:     # embed, attn, mlp, head (or block)
        unit_range = _unit_range(cfg, kind)
        choice = [o for o in models.unit_ops(cfg.family, kind) if o in offered]
        policies = [models.resolve_policy(sorted(choice[j:]) or "none", cfg.family)
                    for j in range(len(choice) + 1)]  # j = ops saved, in forward order
        sizes = [unit_residuals(cfg, kind, pol, seq_len, micro_batch).kept_bytes for pol in policies]
        for j, size in enumerate(sizes):
            run.residuals[(kind, j)] = size
        params = jax.device_put(models.init_params(cfg, 0, unit_range), device)
        x, targets = _inputs(cfg, kind, seq_len, micro_batch, device)
        timing = time_unit(cfg, unit_range, policies[-1], device, params, x, targets, reps, split=True)
        if timing.residual_bytes != sizes[-1]:
            run.notes.append(f"{kind}: engine residual {timing.residual_bytes} B != traced {sizes[-1]} B")
        # Time the backward only where saving one more op changes the residuals:
        # equal residuals mean the same backward, so its recompute time is credited
        # to the next op that does change them.
        distinct = [0] + [j for j in range(1, len(sizes)) if sizes[j] != sizes[j - 1]]
        say(f"{kind}: {len(distinct) if len(distinct) > 1 else 0} backward programs")
        bwd_time = {}
        if len(distinct) > 1:
            bwd_time = {j: (timing if j == len(choice) else
                            time_unit(cfg, unit_range, policies[j], device, params, x, targets, reps)).bwd
                        for j in distinct}
        op_prof = {}
        prev = 0
        for i, op in enumerate(choice):
            grew = sizes[i + 1] - sizes[i]
            if grew < 0:
                run.notes.append(f"{kind}.{op}: saving it shrank the residual by {-grew} bytes; recorded 0")
            t = 0.0
            if (i + 1) in bwd_time:
                t = max(bwd_time[prev] - bwd_time[i + 1], 0.0)
                prev = i + 1
            op_prof[op] = OpProfile(t, float(max(grew, 0)))
        # With every op offered the last telescoped set IS `full`: the summed per-op
        # times are its measured cost (often well under the unit's forward).
        full = sum(o.fwd_time for o in op_prof.values()) if ops is None else None
        units[kind] = UnitProfile(fwd_time=timing.fwd, bwd_time=timing.bwd,
                                  weight_bytes=float(training_state_bytes(params)),
                                  input_bytes=float(sizes[0]), ops=op_prof, full_recompute_time=full,
                                  scratch_bytes=float(timing.temp_bytes or 0), **split_fields(timing))
        say(f"{kind}: fwd {timing.fwd * 1e3:.3f} ms, bwd {timing.bwd * 1e3:.3f} ms, "
            f"residual {sizes[-1]} B (all saved) / {sizes[0]} B (recomputed), XLA scratch {timing.temp_bytes} B")
        del params
    # (a parallel block is one unit per layer: `layer` is its `full`, priced by the unit)
    paired = models.get_family(cfg.family).layer_kinds == ("attn", "mlp")
    layer = _layer_recompute(cfg, seq_len, micro_batch, device, time_unit, reps) if cfg.num_layers and paired else None
    if layer is not None:
        say(f"layer (one checkpoint over attn + mlp): recompute {layer * 1e3:.3f} ms")
    hb, pb, pl = _bandwidths(cfg, seq_len, micro_batch, device, reps, run.notes)
    run.profile = Profile(
        model=cfg.name, device=str(getattr(device, "device_kind", device.platform)),
        num_layers=cfg.num_layers, seq_len=seq_len, micro_batch=micro_batch,
        host_bandwidth=host_bandwidth or hb, p2p_bandwidth=p2p_bandwidth or pb,
        p2p_latency=pl if p2p_latency is None else p2p_latency, units=units, family=cfg.family,
        layer_recompute_time=layer)
    run.seconds = time.perf_counter() - start
    return run


def split_fields(timing) -> dict:
    """The UnitProfile fields of a split backward, from a `time_unit` result that
    timed the engine's I and W programs (`input_grad`, `weight_grad`,
    `weight_grad_bytes`); {} for one that did not."""
    i, w = getattr(timing, "input_grad", None), getattr(timing, "weight_grad", None)
    if i is None or w is None:
        return {}
    out = {"input_grad_time": float(i), "weight_grad_time": float(w),
           "weight_grad_bytes": float(getattr(timing, "weight_grad_bytes", 0) or 0)}
    rederive, held = getattr(timing, "weight_grad_rederive", None), getattr(timing, "weight_grad_rederive_bytes", None)
    if rederive is not None and held is not None:
        out.update(weight_grad_rederive_time=float(rederive), weight_grad_rederive_bytes=float(held))
    for key in ("weight_grad_made_bytes", "weight_grad_beside_bytes"):
        if getattr(timing, key, None) is not None:
            out[key] = float(getattr(timing, key))
    return out


LAYER_SPAN = 5   # layers per timed program for the layer recompute (see _layer_recompute)


def _layer_recompute(cfg, seq_len: int, micro_batch: int, device, time_unit: TimeUnit, reps: int) -> float:
    """Seconds one transformer layer's backward spends recomputing under the
    layer-granular policy (`layer`: one checkpoint over attn_i + mlp_i, keeping only
    its input): the backward of min(LAYER_SPAN, layers) layers under `layer` minus
    the same under `none` (every op saved), per layer, both the engine's program
    timed by `time_unit`. Why a span: per layer, the recompute grows with the layers
    in one program (H200, Llama-2-13B, seq 4096: 3.33 ms alone, 3.64 ms in 5;
    results/h200/profile_v3/diag_layer.json), and stages hold many layers."""
    n = max(1, min(LAYER_SPAN, cfg.num_layers))
    span = (1, 1 + 2 * n)
    params = jax.device_put(models.init_params(cfg, 0, span), device)
    x, _ = _inputs(cfg, "mlp", seq_len, micro_batch, device)
    times = {name: time_unit(cfg, span, models.resolve_policy(name, cfg.family), device, params, x, None,
                             reps).bwd for name in ("none", "layer")}
    return max(times["layer"] - times["none"], 0.0) / n




def _bandwidths(cfg, seq_len: int, micro_batch: int, device, reps: int, notes: list[str]
                ) -> tuple[float, float, float]:
    """(host, p2p bandwidth, p2p latency), timed with device_put where possible."""
    nbytes = micro_batch * seq_len * cfg.hidden * cfg.compute_bytes
    n = max(nbytes, 16 << 20) // 4
    x = jax.device_put(jnp.ones((n,), jnp.float32), device)
    size = n * 4
    host = DEFAULT_HOST_BANDWIDTH
    try:
        kinds = {m.kind for m in device.addressable_memories()}
    except Exception:  # backends without memory kinds: no pinned host to time
        kinds = set()
    if "pinned_host" in kinds:
        sharding = jax.sharding.SingleDeviceSharding(device, memory_kind="pinned_host")
        host = size / median_time(lambda: jax.device_put(x, sharding), max(reps, 3))
    else:
        notes.append(f"no pinned_host memory on {device.platform}: host_bandwidth assumed {host:.3g} B/s")
    others = [d for d in jax.devices() if d != device and d.platform == device.platform]
    if others:
        other = others[0]
        bw = size / median_time(lambda: jax.device_put(x, other), max(reps, 3))
        tiny = jax.device_put(jnp.ones((1,), jnp.float32), device)
        lat = median_time(lambda: jax.device_put(tiny, other), max(reps, 3))
        return host, bw, lat
    notes.append(f"one {device.platform} device: p2p assumed {DEFAULT_P2P_BANDWIDTH:.3g} B/s, "
                 f"latency {DEFAULT_P2P_LATENCY:g} s")
    return host, DEFAULT_P2P_BANDWIDTH, DEFAULT_P2P_LATENCY
