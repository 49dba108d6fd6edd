"""obscura sweep: the parallel-layout table (docs/layouts.md).

Enumerates micro-batch x PP x TP (x SP where TP > 1) x recompute policy x attention
on --gpus GPUs at a fixed global batch, drops layouts that do not fit in memory,
predicts iteration time (per-layer costs measured on the GPU when the measurement
file has them, else an analytic roofline; TP collectives; the project's 1F1B
simulator; overlapped DP gradient traffic) and prints the layouts ranked by MFU.
"""
from __future__ import annotations

import math
import sys
from dataclasses import replace

import models
from obscura_jax.cli.main import add_model_module
from obscura_jax.errors import UsageError
from planner.device import device_spec
from schedules.formats.jsonio import write_json_atomic
from schedules.sizes import GiB, parse_bytes

TOKENS_PER_BATCH = 4 * 1024 * 1024   # LLaMA's 4M-token global batch


def _int_list(text: str) -> tuple[int, ...]:
    try:
        vals = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise UsageError(f"expected comma-separated integers, got {text!r}") from None
    return vals


def _str_list(text: str) -> tuple[str, ...]:
    return tuple(v.strip() for v in text.split(",") if v.strip())


def _sp_list(text: str) -> tuple[bool, ...]:
    vals = []
    for v in _str_list(text):
        if v not in ("on", "off"):
            raise UsageError(f"--sp takes on, off or on,off; got {v!r}")
        vals.append(v == "on")
    return tuple(vals)


def add_parser(sub):
    p = sub.add_parser("sweep", help="rank parallel layouts (mbs x PP x TP x SP x recompute x "
                                     "attention) by predicted MFU", description=__doc__)
    p.add_argument("--model", required=True, help="model name, e.g. llama2-13b, llama-30b")
    p.add_argument("--seq-len", type=int, required=True, help="sequence length T, at most 32768")
    p.add_argument("--gpus", type=int, required=True, help="number of GPUs N, at most 65536")
    p.add_argument("--global-batch", type=int, default=None,
                   help="sequences per iteration (default: the multiple of --gpus nearest to "
                        "4M tokens, i.e. 2048 at 2k, 512 at 8k on 64 GPUs)")
    p.add_argument("--gpu-memory", default="80GiB",
                   help="memory per GPU, e.g. 80GiB (the layouts paper's A100s) or 141GB")
    p.add_argument("--memory-reserve", default="2GiB",
                   help="memory kept free for CUDA context, workspaces, allocator slack")
    p.add_argument("--measured", default=None, metavar="PATH",
                   help="measured layer costs (scripts/layouts/sweep_layer_bench.py output), 'none' = analytic "
                        "only (default: results/h200/sweep_layers.json when present)")
    p.add_argument("--device", default="H200",
                   help="GPU whose rates the analytic model uses (planner/device.py: H200, A100-80GB)")
    p.add_argument("--peak-tflops", type=float, default=None,
                   help="override the device's MFU denominator (default: the device's; H200 bf16 dense: 989)")
    p.add_argument("--matmul-tflops", type=float, default=None,
                   help="override the device's achieved GEMM rate (default: the device's; H200: 791)")
    p.add_argument("--flash-tflops", type=float, default=None,
                   help="override the device's achieved flash-attention rate, causal FLOPs executed "
                        "(default: the device's; H200: 593)")
    p.add_argument("--hbm-tbps", type=float, default=None,
                   help="override the device's achieved HBM bandwidth (default: the device's; H200: 3.36 TB/s)")
    p.add_argument("--nvlink-gbps", type=float, default=360.0,
                   help="NCCL bus bandwidth inside a node, GB/s (NVLink 4)")
    p.add_argument("--internode-gbps", type=float, default=45.0,
                   help="per-GPU bus bandwidth between nodes, GB/s (45: a 400 Gb/s NIC per GPU)")
    p.add_argument("--gpus-per-node", type=int, default=8, help="GPUs per NVLink node")
    p.add_argument("--micro-batches", default="1,2,4", help="micro-batch sizes")
    p.add_argument("--pp", default="1,2,4,8", help="pipeline-parallel sizes")
    p.add_argument("--tp", default="1,2", help="tensor-parallel sizes (4 and 8 allowed too)")
    p.add_argument("--sp", default="off,on", help="sequence parallelism where TP > 1")
    p.add_argument("--policies", default="none,selective,mlp,cmb,full",
                   help="recompute presets")
    p.add_argument("--attention", default="xla,cudnn", help="attention implementations")
    p.add_argument("--state", choices=("bf16", "fp32"), default="bf16",
                   help="bf16: bf16 params+grads, fp32 master+Adam (Megatron, the paper); "
                        "fp32: fp32 params+grads+Adam (this project's models)")
    p.add_argument("--no-zero1", action="store_true",
                   help="replicate optimizer state over DP (default: ZeRO-1 shards it)")
    p.add_argument("--top", type=int, default=20, help="rows to print")
    p.add_argument("--json", metavar="PATH", help="write every layout (fitting or not) as JSON (default: not written)")
    p.add_argument("--csv", metavar="PATH", help="write every layout as CSV (default: not written)")
    add_model_module(p)
    p.set_defaults(func=run)


MAX_SEQ_LEN = 32768          # 8 x the 4k the paper's models were trained at
MAX_GPUS = 65536
MAX_GLOBAL_BATCH = 2 ** 24


def default_global_batch(gpus: int, seq_len: int) -> int:
    return gpus * max(1, round(TOKENS_PER_BATCH / (seq_len * gpus)))


def _progress(done: int, total: int) -> None:
    if sys.stderr.isatty() and (done % 10 == 0 or done == total):
        print(f"\revaluating layouts {done}/{total}", end="" if done < total else "\n",
              file=sys.stderr, flush=True)


def _device(args):
    """The --device description with any rate the flags override."""
    rates = {"peak_flops": args.peak_tflops, "matmul_flops": args.matmul_tflops,
             "flash_attention_flops": args.flash_tflops}
    changes = {k: v * 1e12 for k, v in rates.items() if v is not None}
    if args.hbm_tbps is not None:
        changes["hbm_bandwidth"] = args.hbm_tbps * 1e12
    return replace(device_spec(args.device), **changes)


def _check_args(args) -> None:
    """Every flag checked before anything is computed."""
    for flag, v, bound in (("--seq-len", args.seq_len, MAX_SEQ_LEN), ("--gpus", args.gpus, MAX_GPUS),
                           ("--global-batch", args.global_batch, MAX_GLOBAL_BATCH)):
        if v is not None and v < 1:
            raise UsageError(f"{flag} must be >= 1, got {v}")
        if v is not None and v > bound:
            raise UsageError(f"{flag} must be <= {bound}, got {v} (a bound of the sweep: its cost model is "
                             "made for today's context lengths and cluster sizes)")
    if args.top < 0:
        raise UsageError(f"--top must be >= 0, got {args.top}")
    for flag in ("gpus_per_node",):
        v = getattr(args, flag)
        if v is not None and v < 1:
            raise UsageError(f"--{flag.replace('_', '-')} must be >= 1, got {v}")
    for flag in ("peak_tflops", "matmul_tflops", "flash_tflops", "hbm_tbps", "nvlink_gbps", "internode_gbps"):
        v = getattr(args, flag)
        if v is not None and not (math.isfinite(v) and v > 0):
            raise UsageError(f"--{flag.replace('_', '-')} must be a finite rate > 0, got {v}")


def run(args):
    # lazy (both): the sweep loads JAX (models' parameter counts)
    from planner.layouts import (Hardware, LayoutGrid, TrainingState, default_measured_path,
                                 load_measured, run_sweep)
    from planner.layouts.report import header, table, trends, write_csv_atomic

    _check_args(args)
    cfg = models.get_config(args.model)
    hw = Hardware(device=_device(args), gpu_memory=parse_bytes(args.gpu_memory),
                  memory_reserve=parse_bytes(args.memory_reserve, allow_zero=True),
                  gpus_per_node=args.gpus_per_node, nvlink_bandwidth=args.nvlink_gbps * 1e9,
                  internode_bandwidth=args.internode_gbps * 1e9)
    global_batch = (args.global_batch if args.global_batch is not None
                    else default_global_batch(args.gpus, args.seq_len))
    grid = LayoutGrid(gpus=args.gpus, global_batch=global_batch,
                      micro_batches=_int_list(args.micro_batches), pps=_int_list(args.pp),
                      tps=_int_list(args.tp), policies=_str_list(args.policies),
                      attentions=_str_list(args.attention), sequence_parallel=_sp_list(args.sp))
    if args.measured is None:
        path = default_measured_path()
        measured = load_measured(path) if path else None
    elif args.measured.lower() == "none":
        measured = None
    else:
        measured = load_measured(args.measured)
    result = run_sweep(cfg, args.seq_len, grid, hw,
                       TrainingState(args.state, zero1=not args.no_zero1), measured, _progress)
    if args.json:
        write_json_atomic(args.json, result.to_json())
    if args.csv:
        write_csv_atomic(args.csv, result)
    print("\n".join(header(result)))
    for note in result.notes:
        print(f"note: {note}")
    if not result.fitting:
        smallest = result.results[0]
        raise UsageError(
            f"no layout fits in {hw.gpu_memory / GiB:.1f} GiB per GPU; the smallest needs "
            f"{smallest.memory.total / GiB:.1f} GiB ({smallest.layout.label} "
            f"{smallest.layout.policy} {smallest.layout.attention})")
    print()
    print("\n".join(table(result, args.top)))
    print()
    print("\n".join(trends(result)))
    if args.json or args.csv:
        print("wrote " + " and ".join(p for p in (args.json, args.csv) if p))
    return 0
