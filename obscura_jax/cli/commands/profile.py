"""obscura profile: measure a profile (obscura-profile/1) on the current JAX device,
or derive one from the model's shapes (--analytic DEVICE) where no GPU is at hand."""
from __future__ import annotations

import math
from dataclasses import replace

import models
from obscura_jax.cli.capacity import check_host_memory
from obscura_jax.cli.main import add_model_module
from obscura_jax.devices import request_host_devices
from obscura_jax.errors import UsageError
from planner.profile import MAX_LAYERS, derive_profile, save_profile
from schedules.sizes import format_bytes


def add_parser(sub):
    p = sub.add_parser(
        "profile", help="measure per-unit and per-op costs for the planner (obscura-profile/1)",
        description="Measure forward/backward time, weight/input bytes and per-op recompute time and "
                    "kept bytes of each unit kind on the current JAX device (real compiled programs, "
                    "median of --reps runs), or derive them from shapes with --analytic.")
    p.add_argument("--model", required=True, help="registered model name, e.g. llama2-13b, llama2-tiny")
    p.add_argument("--seq-len", type=int, required=True, metavar="T", help="sequence length")
    p.add_argument("--micro-batch", type=int, default=1, metavar="B", help="micro-batch size")
    p.add_argument("--attention", choices=("xla", "cudnn"), default=None,
                   help="attention implementation (default: cuDNN on GPU with 16-bit compute, else XLA)")
    p.add_argument("--reps", type=int, default=5, help="timed repetitions per program (median)")
    p.add_argument("--policy-ops", default=None, metavar="OPS",
                   help="comma-separated ops to offer for recompute (default: every op); the others "
                        "are always saved and count as unit input")
    p.add_argument("--analytic", default=None, metavar="DEVICE",
                   help="derive the profile from shapes for DEVICE (A100-80GB or H200) instead of measuring "
                        "(default: measure on this machine's first JAX device)")
    p.add_argument("--layers", type=int, default=None,
                   help="write the profile for this many layers (the paper's 18/23/28B = 13B + layers) "
                        "(default: the model's own)")
    p.add_argument("--host-bandwidth", type=float, default=None,
                   help="override host<->device bytes/s (default: measured, or the device's figure)")
    p.add_argument("--p2p-bandwidth", type=float, default=None,
                   help="override device<->device bytes/s (default: measured, or the device's figure)")
    p.add_argument("--json", required=True, metavar="PATH", help="where to write the profile")
    add_model_module(p)
    p.set_defaults(func=run)


def check_args(args) -> None:
    """Every flag checked before JAX starts or anything is measured."""
    for flag, v in (("--seq-len", args.seq_len), ("--micro-batch", args.micro_batch), ("--reps", args.reps),
                    ("--layers", args.layers)):
        if v is not None and v < 1:
            raise UsageError(f"{flag} must be >= 1, got {v}")
    if args.layers is not None and args.layers > MAX_LAYERS:
        raise UsageError(f"--layers must be <= {MAX_LAYERS} (a bound of the planner, which walks every unit), "
                         f"got {args.layers}")
    for flag, v in (("--host-bandwidth", args.host_bandwidth), ("--p2p-bandwidth", args.p2p_bandwidth)):
        if v is not None and not (math.isfinite(v) and v > 0):
            raise UsageError(f"{flag} must be a finite number of bytes/s > 0, got {v} (leave it out to measure)")


def run(args):
    check_args(args)
    request_host_devices(2)  # a second (emulated) CPU device lets p2p be timed on CPU too
    # lazy (these three): JAX starts after the emulated devices are requested
    from obscura_jax.observe.measure import time_unit_program
    from planner.analytic import analytic_profile
    from obscura_jax.profiling.profiler import profile_model

    overrides = {"attention_impl": args.attention} if args.attention else {}
    cfg = models.get_config(args.model, **overrides)
    if not args.analytic:      # one unit of each kind is built and run on this machine's first device
        import jax  # lazy: started above, after the emulated devices were requested
        check_host_memory(cfg, "adamw", args.micro_batch, args.seq_len, platform=jax.default_backend(),
                          state=False, units=2)      # a unit and the head's logits at a time
    notes: list[str] = []
    if args.analytic:
        prof = analytic_profile(cfg, args.seq_len, args.micro_batch, args.analytic)
        prof = replace(prof, host_bandwidth=args.host_bandwidth or prof.host_bandwidth,   # > 0: checked
                       p2p_bandwidth=args.p2p_bandwidth or prof.p2p_bandwidth)
        seconds = None
    else:
        ops = None
        if args.policy_ops is not None:
            ops = [o.strip() for o in args.policy_ops.split(",") if o.strip()]
        result = profile_model(cfg, args.seq_len, args.micro_batch, time_unit=time_unit_program,
                               reps=args.reps, ops=ops,
                               host_bandwidth=args.host_bandwidth, p2p_bandwidth=args.p2p_bandwidth,
                               progress=lambda msg: print(f"  {msg}", flush=True))
        prof, notes, seconds = result.profile, result.notes, result.seconds
    if args.layers is not None:
        prof = derive_profile(prof, args.layers)
    save_profile(prof, args.json)

    print(f"{prof.model} on {prof.device}: seq {prof.seq_len}, micro-batch {prof.micro_batch}, "
          f"{prof.num_layers} layers" + (f" ({seconds:.1f} s)" if seconds is not None else ""))
    print(f"{'unit':6} {'fwd ms':>9} {'bwd ms':>9} {'weights':>11} {'input':>11} {'kept (none)':>12}  ops")
    for kind, u in prof.units:
        print(f"{kind:6} {u.fwd_time * 1e3:9.3f} {u.bwd_time * 1e3:9.3f} {format_bytes(u.weight_bytes, 2):>11} "
              f"{format_bytes(u.input_bytes, 2):>11} {format_bytes(u.kept_bytes(()), 2):>12}  {len(u.ops)}")
    if prof.layer_recompute_time is not None:
        print(f"layer recompute (one checkpoint over attn + mlp, policy `layer`): "
              f"{prof.layer_recompute_time * 1e3:.3f} ms per layer")
    print(f"bandwidths: host {prof.host_bandwidth / 1e9:.2f} GB/s, p2p {prof.p2p_bandwidth / 1e9:.2f} GB/s, "
          f"latency {prof.p2p_latency * 1e6:.1f} us")
    for n in notes:
        print(f"note: {n}")
    print(f"wrote {args.json}")
    return 0
