"""Stage MFU benchmark: the project's own Llama-2-13B stage (models + stage
functions) timed forward+backward on one device, per recompute policy and
attention implementation, beside a plain bf16 matmul ceiling measured in the same
run.

    python scripts/bench/bench_stage_mfu.py --out results/h200            # GPU defaults
    python scripts/bench/bench_stage_mfu.py --tiny --out /tmp/mfu          # CPU smoke run

MFU convention (docs/layouts.md; the plain-JAX stage yardstick's, whose output is
results/h200/yardstick_plain_jax_stage.txt):
model FLOPs of the stage = layers * (2*T*(4*H^2 + 3*H*F) + 4*T^2*H) per forward,
x3 for forward+backward; recompute is not counted. Timing: jit(grad) of
sum(stage(x)) w.r.t. params and input, warm-up, then `--rounds` rounds of `--reps`
back-to-back steps; the median round mean is reported.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import jax
import jax.numpy as jnp

import models
from obscura_jax.profiling.stopwatch import median_time


def stage_flops(cfg, seq_len: int, micro_batch: int, num_layers: int) -> float:
    h, f, t = cfg.hidden, cfg.ffn_hidden, seq_len
    mats = 4 * h * h + (3 if cfg.family == "llama" else 2) * h * f
    return 3.0 * micro_batch * num_layers * (2 * t * mats + 4 * t * t * h)


def matmul_ceiling(n: int, reps: int, rounds: int) -> float:
    k1, k2 = jax.random.split(jax.random.key(1))
    a = jax.random.normal(k1, (n, n), jnp.bfloat16)
    b = jax.random.normal(k2, (n, n), jnp.bfloat16)
    mm = jax.jit(lambda a, b: a @ b)
    dt = median_time(lambda: mm(a, b), rounds, calls=reps, warmup=2)
    return 2.0 * n ** 3 / dt


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="llama2-13b")
    ap.add_argument("--layers", type=int, default=5)
    ap.add_argument("--seq-len", type=int, default=4096)
    ap.add_argument("--micro-batch", type=int, default=1)
    ap.add_argument("--policies", default="none,cmb,mlp,full")
    ap.add_argument("--attention", default="cudnn,xla")
    ap.add_argument("--param-dtype", default="bfloat16",
                    help="bfloat16 matches the yardstick; float32 is the training default")
    ap.add_argument("--peak-tflops", type=float, default=989.0)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--matmul", type=int, default=8192)
    ap.add_argument("--tiny", action="store_true", help="CPU smoke run on llama2-tiny")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    if args.tiny:
        args.model, args.layers, args.seq_len, args.attention = "llama2-tiny", 2, 64, "xla"
        args.param_dtype, args.matmul, args.reps, args.rounds = "float32", 512, 2, 2
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    device = jax.devices()[0]
    peak = args.peak_tflops * 1e12
    ceiling = matmul_ceiling(args.matmul, max(args.reps * 4, 10), args.rounds)
    print(f"device {device.device_kind}; bf16 {args.matmul}^3 matmul: {ceiling / 1e12:.1f} TFLOP/s "
          f"({ceiling / peak:.1%} of {args.peak_tflops:g})", flush=True)
    rows = [row for impl in args.attention.split(",") for row in measure_policies(args, impl, peak, ceiling)]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    result = {"device": device.device_kind, "jax": jax.__version__, "model": args.model,
              "peak_tflops": args.peak_tflops, "matmul_tflops": ceiling / 1e12,
              "matmul_n": args.matmul, "rows": rows}
    (out / "stage_mfu.json").write_text(json.dumps(result, indent=1) + "\n")
    return 0


def measure_policies(args, impl: str, peak: float, ceiling: float) -> list[dict]:
    """One row per policy for the stage built with attention `impl`."""
    rows = []
    base = models.get_config(args.model)
    overrides = dict(num_layers=args.layers, attention_impl=impl, param_dtype=args.param_dtype)
    if args.tiny:
        overrides.pop("param_dtype")
    else:
        overrides["compute_dtype"] = "bfloat16"
    cfg = base.replace(**overrides)
    params = models.init_params(cfg, 0)
    unit_range = (1, cfg.num_units - 1)       # every attn/mlp unit, no embed/head
    sub = models.stage_params(params, unit_range)
    x = (jax.random.normal(jax.random.key(2), (args.micro_batch, args.seq_len, cfg.hidden),
                           jnp.float32) * 0.5).astype(cfg.compute_dtype)
    flops = stage_flops(cfg, args.seq_len, args.micro_batch, args.layers)
    for pol in args.policies.split(","):
        stage = models.build_stage(cfg, unit_range, pol)

        def loss(p, x, stage=stage):
            return jnp.sum(stage.apply(p, x).astype(jnp.float32))

        step = jax.jit(jax.grad(loss, argnums=(0, 1)))
        row = {"attention": impl, "policy": pol, "layers": args.layers, "seq_len": args.seq_len,
               "micro_batch": args.micro_batch, "param_dtype": cfg.param_dtype}
        try:
            dt = median_time(lambda: step(sub, x), args.rounds, calls=args.reps, warmup=2)
            res = models.unit_residual_bytes(cfg, "attn", pol, args.seq_len, args.micro_batch) + \
                models.unit_residual_bytes(cfg, "mlp", pol, args.seq_len, args.micro_batch)
            row.update(fwd_bwd_s=dt, mfu=flops / dt / peak, of_matmul=flops / dt / ceiling,
                       residual_bytes_per_layer=int(res))
            print(f"{impl:5s} {pol:9s} fwd+bwd {dt * 1e3:8.2f} ms  MFU({args.peak_tflops:g}) "
                  f"{row['mfu']:6.1%}  of-matmul {row['of_matmul']:6.1%}  "
                  f"residual/layer {res / 1e6:8.1f} MB", flush=True)
        except Exception as e:  # e.g. OOM, or cudnn unavailable: record and go on
            row["error"] = repr(e)[:300]
            print(f"{impl:5s} {pol:9s} failed: {row['error']}", flush=True)
        rows.append(row)
    del params, sub
    return rows


if __name__ == "__main__":
    sys.exit(main())
