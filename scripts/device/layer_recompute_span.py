#!/usr/bin/env python
"""Per-layer recompute by span: the engine's program (`none`, `layer`, `full`) over 1, 2
and 5 layers, beside the yardstick (experiments.layer_yardstick) over 1 and 5 layers.
Why it exists: it showed that the recompute per layer grows with the layers in one
program, which is why the profiler times the layer recompute over a span
(obscura_jax/profiling/profiler.py LAYER_SPAN). Output: results/h200/profile_v3/diag_layer.json.

    PYTHONPATH=$PWD python3 scripts/device/layer_recompute_span.py --out $OUT            # H200, ~1 min
    python scripts/device/layer_recompute_span.py --model llama2-tiny --seq-len 64 --spans 1,2 --out /tmp/x
"""
import argparse
import json
import sys
from pathlib import Path

from obscura_jax.cli.main import run_command
from obscura_jax.errors import UsageError


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="llama2-13b", help="registered model")
    ap.add_argument("--seq-len", type=int, default=4096, help="sequence length")
    ap.add_argument("--spans", default="1,2,5", help="layers per program, comma list")
    ap.add_argument("--out", required=True, help="folder for diag_layer.json")
    args = ap.parse_args(argv)
    return run_command("layer_recompute_span", lambda: run(args, parse_spans(args.spans)))


def parse_spans(text: str) -> list[int]:
    try:
        spans = [int(s) for s in text.split(",")]
    except ValueError:
        raise UsageError(f"--spans must be a comma list of whole numbers, got {text!r}") from None
    if not spans or min(spans) < 1:
        raise UsageError(f"--spans must be >= 1 each, got {text!r}")
    return spans


def run(args, spans: list[int]) -> int:
    # lazy: argument errors answer without starting JAX
    import jax
    import models
    from experiments.layer_yardstick import layer_yardstick
    from obscura_jax.observe.measure import CostTiming, time_unit_program
    from obscura_jax.profiling.profiler import _inputs
    cfg = models.get_config(args.model)
    if max(spans) > cfg.num_layers:
        raise UsageError(f"--spans {args.spans}: {cfg.name} has {cfg.num_layers} layers")
    dev = jax.devices()[0]
    out = {}
    for n in spans:
        params = jax.device_put(models.init_params(cfg, 0, (1, 1 + 2 * n)), dev)
        x, _ = _inputs(cfg, "attn", args.seq_len, 1, dev)
        t = {name: time_unit_program(cfg, (1, 1 + 2 * n), models.resolve_policy(name, cfg.family), dev, params, x,
                                     None, 3) for name in ("none", "layer", "full")}
        out[f"engine_{n}"] = {k: {"fwd": v.fwd, "bwd": v.bwd} for k, v in t.items()}
        print(f"{n} engine program per layer: layer recompute {(t['layer'].bwd - t['none'].bwd) * 1e3 / n:.3f} ms, "
              f"unit(full) recompute {(t['full'].bwd - t['none'].bwd) * 1e3 / n:.3f} ms", flush=True)
    timing = CostTiming.for_device(dev, 3)
    for n in (spans[0], spans[-1]):
        y = layer_yardstick(cfg, n, args.seq_len, 1, dev, timing)
        out[f"yard_{n}"] = y
        print(f"{n} yardstick per layer: recompute {y['recompute_per_layer_s'] * 1e3:.3f} ms", flush=True)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "diag_layer.json").write_text(json.dumps(out, indent=1, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
