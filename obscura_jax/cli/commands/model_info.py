"""obscura model-info MODEL: parameter count, FLOPs per token, units, and the
residual bytes each recompute preset keeps per layer (measured from traced
programs; no weight is allocated)."""
from __future__ import annotations

import models
from obscura_jax.cli.blame import check_user_model
from obscura_jax.cli.main import add_model_module
from schedules.formats.jsonio import write_json_atomic
from schedules.sizes import format_bytes


def add_parser(sub):
    p = sub.add_parser(
        "model-info", help="params, FLOPs/token, units and measured activation bytes of a model",
        description=__doc__)
    p.add_argument("model", help="model name, e.g. llama2-13b, gpt3-tiny")
    p.add_argument("--seq-len", type=int, default=None,
                   help="sequence length T (default: min(4096, the model's max_seq_len))")
    p.add_argument("--micro-batch", type=int, default=1, help="micro-batch size B (default 1)")
    p.add_argument("--attention", choices=("xla", "cudnn"), default=None,
                   help="attention implementation (default: the config's)")
    p.add_argument("--json", metavar="PATH", help="also write the full report as JSON (default: not written)")
    add_model_module(p)
    p.set_defaults(func=run)


def format_report(info: dict) -> str:
    lines = [
        f"{info['model']} ({info['family']}): {info['params']:,} params "
        f"({info['params'] / 1e9:.2f}B), {info['num_layers']} layers, {len(info['units'])} units",
        f"seq {info['seq_len']}, micro-batch {info['micro_batch']}, compute {info['compute_dtype']}, "
        f"params {info['param_dtype']}, attention {info['attention_impl']}",
        f"FLOPs/token {info['flops_per_token']:.4g}  ({info['flops_convention']}; "
        f"N = {info['flops_params']:,})",
        "",
        f"{'unit kind':<10}{'params':>16}{'input kept':>14}",
    ]
    for kind, k in info["unit_kinds"].items():
        lines.append(f"{kind:<10}{k['params']:>16,}{format_bytes(k['input_bytes']):>14}")
    lines += ["", f"{'policy':<11}{'residual/layer':>16}{'saving vs none':>16}  recomputed ops"]
    for name, p in info["policies"].items():
        ops = ",".join(p["recompute"]) or "-"
        lines.append(f"{name:<11}{format_bytes(p['residual_bytes_per_layer']):>16}"
                     f"{p['saving_vs_none']:>15.1%}  {ops}")
    lines += ["", f"{'op':<12}{'act bytes':>14}  (per micro-batch, measured from residuals)"]
    for kind, k in info["unit_kinds"].items():
        for op, v in k["ops"].items():
            lines.append(f"{op:<12}{format_bytes(v['act_bytes']):>14}  [{kind}]")
    lines.append(f"'none' = {info['none_means']}")
    return "\n".join(lines)


def run(args):
    from models.info import model_info  # lazy: JAX

    overrides = {"attention_impl": args.attention} if args.attention else {}
    cfg = models.get_config(args.model, **overrides)
    seq_len = args.seq_len if args.seq_len is not None else min(4096, cfg.max_seq_len)
    check_user_model(cfg, seq_len, args.micro_batch, finite=True)    # a model module of the user's: its contract
    info = model_info(cfg, seq_len, args.micro_batch)
    print(format_report(info))
    if args.json:
        write_json_atomic(args.json, info)
        print(f"wrote {args.json}")
    return 0
