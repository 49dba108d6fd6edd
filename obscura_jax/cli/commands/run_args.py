"""Command-line flags shared by `obscura train` and `obscura compare`, and their
translation into RunConfig. Light on purpose: no JAX import here (devices must be
chosen before JAX starts)."""
from __future__ import annotations

import argparse
from pathlib import Path

import models
from obscura_jax.cli.blame import check_user_model
from obscura_jax.cli.capacity import check_device_count, check_host_memory, kept_bytes
from obscura_jax.cli.main import add_model_module
from obscura_jax.devices import parse_devices
from obscura_jax.checkpoints.directory import saved_process_count
from obscura_jax.errors import RunError, UsageError
from obscura_jax.processes.launch import process_spec, without_flag
from obscura_jax.processes.supervise import launch_local
from obscura_jax.observe.step_time import timed
from obscura_jax.run.run_config import DEFAULT_MICROBATCHES, DEFAULT_STAGES, RunConfig, default_warmup_steps
from planner.plans.plan_meta import layout_from_json, source_from_json
from schedules.generators import CHUNKED
from schedules.formats.jsonio import read_json
from schedules.sizes import split_items
from schedules.generators.join import FIRST_WEIGHT_GRAD


# Defaults of the flags a preset (compare --demo) may set; a flag left at None
# takes the preset's value, then this one.
FLAG_DEFAULTS = {"model": "llama2-tiny", "micro_batch_size": 2, "seq_len": 64, "data": "synthetic",
                 "steps": 6, "lr": 1e-3, "policy": "none"}


def fill_defaults(args, preset: dict | None = None) -> None:
    """Give every flag the user did not pass its preset value, else its default."""
    for key, value in (preset or {}).items():
        if getattr(args, key, None) is None:
            setattr(args, key, value)
    for key, value in FLAG_DEFAULTS.items():
        if getattr(args, key) is None:
            setattr(args, key, value)


def steps_help() -> str:
    """--steps' help, from the defaults and the step timing's own rule (observe.step_time)."""
    steps = FLAG_DEFAULTS["steps"]
    warm = default_warmup_steps(steps)
    return (f"total training steps (default {steps}: after {warm} warm-up step{'s' * (warm != 1)} (--warmup-steps), "
            f"{len(timed(range(steps), warm))} steps are timed for the min/median/max step time)")


def add_model_data_args(p: argparse.ArgumentParser) -> None:
    """Long: one add_argument per flag of train and compare, in three groups."""
    g = p.add_argument_group("model and data")
    d = FLAG_DEFAULTS
    g.add_argument("--model", default=None, help=f"model config name (default {d['model']})")
    g.add_argument("--micro-batch-size", type=int, default=None, metavar="b",
                   help=f"rows per micro-batch (default {d['micro_batch_size']})")
    g.add_argument("--seq-len", type=int, default=None, metavar="T", help=f"tokens per row (default {d['seq_len']})")
    g.add_argument("--data", default=None, metavar="synthetic|stdlib|PATH",
                   help="synthetic = random tokens, stdlib = byte tokens of Python's own "
                        "standard library, or a token file (.npy, or raw memmap with --dtype) "
                        f"(default {d['data']})")
    g.add_argument("--dtype", default=None, choices=("uint16", "uint32"),
                   help="dtype of a raw token file (default: none; needed for a raw --data file)")
    g.add_argument("--seed", type=int, default=0, help="params and data seed, 0 .. 2**63-1 (default 0)")
    g.add_argument("--compute-dtype", default=None, choices=("float32", "bfloat16", "float16"),
                   help="override the model's activation dtype (default: the model config's)")
    g.add_argument("--layers", type=int, default=None, metavar="L",
                   help="override the model's layer count (e.g. a 1B-per-stage slice of a big model) "
                        "(default: the model config's)")
    add_model_module(g)

    g = p.add_argument_group("pipeline")
    g.add_argument("--stages", type=int, default=None, metavar="P", help=f"pipeline stages (default {DEFAULT_STAGES})")
    g.add_argument("--microbatches", type=int, default=None, metavar="M",
                   help=f"micro-batches per step (default {DEFAULT_MICROBATCHES})")
    g.add_argument("--policy", default=None, metavar="NAME|ops",
                   help="recompute policy of non-adjusted stages: a preset of the model's family "
                        "(llama, gpt: none, full, selective, mlp, cmb), `layer` (one checkpoint per "
                        f"transformer layer, keeping its input) or comma-separated op names (default {d['policy']})")
    g.add_argument("--offload", default=None, metavar="OPS", help="ops whose outputs every stage keeps in pinned "
                   "host memory from forward to backward, not on the device: names as --policy, none recomputed by "
                   "it; adjusted stages offload those they do not recompute (default: none)")
    g.add_argument("--adjusted-policy", default="full", metavar="NAME|ops",
                   help="recompute set of adjusted stages: full (per unit), layer (per transformer layer, "
                        "DAPPLE+ as the paper runs it) or ops (default full)")
    g.add_argument("--virtual-stages", type=int, default=None, metavar="V",
                   help=f"model chunks per device of {' / '.join(CHUNKED)} (default 2): "
                        "--stages devices run stages x V model stages")
    add_layout_args(g)
    g.add_argument("--devices", default=None, metavar="cpu:N|gpu",
                   help="cpu:N = N emulated CPU devices; gpu = the visible GPUs (default: GPUs if any, "
                        "else one emulated CPU device per stage)")
    g.add_argument("--stage-devices", default=None, metavar="I,J,...",
                   help="device index per stage (default: round-robin over the devices)")

    g = p.add_argument_group("training")
    g.add_argument("--steps", type=int, default=None, help=steps_help())
    g.add_argument("--optimizer", default="adamw", choices=("adamw", "adam", "sgd"), help="optax optimizer")
    g.add_argument("--lr", type=float, default=None, help=f"learning rate (default {d['lr']:g})")
    g.add_argument("--weight-decay", type=float, default=None,
                   help="adamw weight decay, finite and >= 0 (default 0.01; adam and sgd take none)")
    g.add_argument("--warmup-steps", type=int, default=None,
                   help="steps excluded from the median iteration time, fewer than --steps (default "
                        f"{default_warmup_steps(2)}; {default_warmup_steps(1)} for a one-step run)")
    add_weight_grad_args(g)
    g.add_argument("--swap-mechanism", default="device_put", choices=("device_put", "jit"),
                   help="how SO/SI move residuals (default device_put: overlaps on GPUs)")
    g.add_argument("--no-swap", action="store_true",
                   help="run the schedule's SO/SI as no-ops (to measure what swapping costs)")
    g.add_argument("--cost-reps", type=int, default=3,
                   help="repetitions when timing each stage for the simulator (default 3)")
    g.add_argument("--no-progress", action="store_true", help="no progress bar (default: a bar on a terminal)")
    add_memory_args(g)


def add_memory_args(g) -> None:
    """The memory check's limit and its override (docs/cli.md, "Device memory")."""
    g.add_argument("--device-memory", default=None, metavar="SIZE",
                   help="bytes each device's allocator holds, e.g. 24GiB: the memory check's limit (default: "
                        "the device's memory_stats; none on CPU: unchecked)")
    g.add_argument("--force", action="store_true",
                   help="run even where the memory check says a device cannot hold the run")


def add_weight_grad_args(g) -> None:
    """What a split backward's W holds (docs/cli.md, W's held block between I and W)."""
    g.add_argument("--weight-grad", default=None, choices=("hold", "rederive"),
                   help="a split backward's W (zb-*): hold = I hands W each weight matmul's input and output "
                        "gradient; rederive = W keeps each unit's input and recomputes the matmul inputs (less "
                        "held between I and W, a longer W) (default: --plan's, else hold)")
    g.add_argument("--head-weight-grad", default="auto", choices=("auto", "defer", "at-once"),
                   help="the head's W: at-once = computed inside I, holding nothing; defer = a W like the others; "
                        "auto = at once when it holds more bytes per FLOP than a layer's W (default auto)")
    g.add_argument("--first-weight-grad", default="split", choices=FIRST_WEIGHT_GRAD,
                   help="stage 0's W: at-once = its backward runs whole where its W follows its I (nothing waits "
                        "for the first stage's input gradient; obscura plan's orders do so); split = the "
                        "generator's order as written (default split)")


def add_layout_args(g) -> None:
    """Data and tensor parallelism inside each stage (docs/parallelism.md)."""
    g.add_argument("--data-parallel", type=int, default=None, metavar="D",
                   help="data parallelism inside each stage: every micro-batch splits over D devices "
                        "(default 1; docs/parallelism.md)")
    g.add_argument("--tensor-parallel", type=int, default=None, metavar="T",
                   help="tensor parallelism inside each stage (Megatron layout over T devices; default 1); "
                        "a run uses pipeline devices x D x T devices")
    g.add_argument("--layout", default=None, metavar="ROW",
                   help="run one row of a layout sweep (`obscura sweep --json`): FILE:INDEX (INDEX from 1, "
                        "as the sweep ranks its rows) or FILE (its best runnable row); sets the model, seq len, "
                        "stages, D, T, micro-batch size (the row's x D), micro-batches, policy and attention")


def add_check_arg(g) -> None:
    """--check of `train` and `compare`."""
    g.add_argument("--check", action="store_true",
                   help="also train the unpipelined model on one device and compare losses and params "
                        "(runs both with float32 matmul precision 'highest'; exit 1 where they differ)")


def exact_matmuls() -> None:
    """GPUs run float32 matmuls in TF32 by default; --check compares exact float32."""
    import jax  # lazy: JAX starts after the devices are chosen
    jax.config.update("jax_default_matmul_precision", "highest")


def add_process_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("several processes and hosts (docs/multiprocess.md)")
    g.add_argument("--processes", type=int, default=1, metavar="N",
                   help="start N local processes, stages split among them (like torchrun --nproc-per-node)")
    g.add_argument("--devices-per-process", type=int, default=1, metavar="K",
                   help="devices each process runs stages on (CPU: emulated devices; default 1)")
    g.add_argument("--coordinator", default=None, metavar="HOST:PORT",
                   help="several hosts: process 0's address (or OBSCURA_COORDINATOR)")
    g.add_argument("--data-across-processes", action="store_true",
                   help="with --data-parallel D: split every stage's data axis over the processes (each "
                        "holds D / processes data rows of every stage) instead of giving each process whole "
                        "stage meshes")
    g.add_argument("--num-processes", default=None, metavar="N",
                   help="several hosts: processes in the run (or OBSCURA_NUM_PROCESSES)")
    g.add_argument("--process-id", default=None, metavar="I",
                   help="several hosts: this process, 0..N-1 (or OBSCURA_PROCESS_ID)")


def run_with_processes(args, num_stages: int, body) -> int:
    """body(place, group) -> exit code: in this process alone (group: the single one),
    as one process of several (--coordinator/--num-processes/--process-id or the
    OBSCURA_* variables), or by starting --processes N local ones running this command."""
    check_device_count(args.devices, num_stages, layout_width(args), args.processes, args.devices_per_process)
    spec = process_spec(args.coordinator, args.num_processes, args.process_id, devices=args.devices,
                        devices_per_process=args.devices_per_process)
    if args.processes < 1:
        raise UsageError(f"--processes must be >= 1, got {args.processes}")
    check_resume_process_count(args, spec)
    if args.processes > 1:
        if spec is not None:
            raise UsageError("--processes starts local processes: it does not combine with --coordinator, "
                             "--num-processes, --process-id or the OBSCURA_* variables")
        process_spec("127.0.0.1:1", args.processes, 0, devices=args.devices,
                     devices_per_process=args.devices_per_process, environ={})   # refuse bad flags here
        return launch_local(without_flag(args.argv, "--processes"), args.processes,
                            devices_per_process=args.devices_per_process)
    if spec is None:
        if args.devices_per_process != 1:
            raise UsageError("--devices-per-process needs --processes N (or --num-processes N)")
        place = choose_devices(args, num_stages * layout_width(args))   # before JAX starts
        from obscura_jax.processes.process_group import SINGLE  # lazy: JAX starts after the devices are chosen
        return body(place, SINGLE)
    from obscura_jax.processes.distributed import run_distributed  # lazy (these two): JAX starts in the child's join
    from obscura_jax.runtime.placement import parse_stage_devices, place_across_processes
    stage_devices = parse_stage_devices(args.stage_devices, num_stages) if args.stage_devices else None
    return run_distributed(spec, lambda group: body(
        lambda p: place_across_processes(p, spec.platform, stage_devices), group))


def check_resume_process_count(args, spec) -> None:
    """A --resume on another process count than its checkpoint's is refused before a
    process starts (the line the run's own identity check gives)."""
    if not (getattr(args, "resume", False) and getattr(args, "checkpoint_dir", None)):
        return
    saved = saved_process_count(args.checkpoint_dir)
    have = spec.num_processes if spec is not None else args.processes
    if saved is not None and saved != have:
        raise RunError(f"cannot resume {Path(args.checkpoint_dir).absolute()}: checkpoint has process count "
                       f"{saved!r}, this run has {have!r}")


def add_schedule_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("schedule transformation")
    g.add_argument("--adjusted", default=None, metavar="K|all",
                   help="adjusted (recomputing) stages of recomp, strawman and obscura: K = stages 0..K, "
                        "all, or a comma list (default: ALL stages, each recomputing --adjusted-policy "
                        "(full): the slowest setting; e.g. --adjusted 1 recomputes on stages 0-1 only; "
                        "gpipe and 1f1b adjust no stage)")
    g.add_argument("--swap-blocks", type=int, default=0, metavar="L",
                   help="lambda: blocks the last adjusted stage swaps out in warm-up (+1 per earlier stage)")
    g.add_argument("--swap-fraction", type=float, default=0.0, metavar="B", help="beta: fraction of a block swapped")


LAYOUT_KEYS = ("data_parallel", "tensor_parallel")


def plan_preset(path: str | None) -> dict:
    """Flag defaults from a plan's stage mesh and source (model, layers, seq len,
    micro-batch): what `train --plan` runs unless told otherwise."""
    if not path:
        return {}
    data = read_json(path, "plan file")
    if not isinstance(data, dict):
        return {}
    preset = dict(zip(LAYOUT_KEYS, layout_from_json(data)))
    source = source_from_json(data)
    if source is None:
        return preset
    preset.update({"seq_len": source.seq_len, "micro_batch_size": source.micro_batch})
    cfg = models.CONFIGS.get(source.base_model)
    if cfg is not None:
        preset["model"] = cfg.name
        if source.num_layers != cfg.num_layers:
            preset["layers"] = source.num_layers
    return preset


def needed_stages(args) -> int:
    """Stage count known without JAX (for choosing emulated devices first)."""
    if getattr(args, "stages", None):
        return args.stages
    plan, sched = getattr(args, "plan", None), getattr(args, "schedule", None)
    path, what = (plan, "plan file") if plan else (sched, "schedule file")
    if not path or (not plan and not path.endswith(".json")):
        return DEFAULT_STAGES
    data = read_json(path, what)
    n = data.get("num_stages") if isinstance(data, dict) else None
    return n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else DEFAULT_STAGES


def run_config(args, **overrides) -> RunConfig:
    model_overrides = []
    if getattr(args, "compute_dtype", None):
        model_overrides.append(("compute_dtype", args.compute_dtype))
    if getattr(args, "layers", None) is not None:
        model_overrides.append(("num_layers", args.layers))
    if getattr(args, "attention", None):          # set by --layout (the sweep row's kernel)
        model_overrides.append(("attention_impl", args.attention))
    kw = dict(
        model=args.model, stages=args.stages, microbatches=args.microbatches,
        schedule=getattr(args, "schedule", "1f1b"), adjusted=getattr(args, "adjusted", None),
        adjusted_policy=split_items(args.adjusted_policy, "--adjusted-policy", UsageError),
        policy=args.policy, offload=() if getattr(args, "offload", None) is None else args.offload,
        swap_blocks=getattr(args, "swap_blocks", 0),
        virtual_stages=getattr(args, "virtual_stages", None),
        swap_fraction=getattr(args, "swap_fraction", 0.0), steps=args.steps, seed=args.seed,
        micro_batch_size=args.micro_batch_size, seq_len=args.seq_len, data=args.data,
        data_dtype=args.dtype, plan=getattr(args, "plan", None),
        plan_scale_down=getattr(args, "plan_scale_down", False),
        checkpoint_dir=getattr(args, "checkpoint_dir", None), resume=getattr(args, "resume", False),
        checkpoint_every=getattr(args, "checkpoint_every", None) or 0, optimizer=args.optimizer,
        learning_rate=args.lr, weight_decay=weight_decay(args), warmup_steps=args.warmup_steps,
        swap_mechanism=args.swap_mechanism, swap_enabled=not args.no_swap, cost_reps=args.cost_reps,
        model_overrides=tuple(model_overrides), data_parallel=_given(args, "data_parallel", 1),
        tensor_parallel=_given(args, "tensor_parallel", 1),
        data_across_processes=getattr(args, "data_across_processes", False),
        device_memory=getattr(args, "device_memory", None), force_memory=getattr(args, "force", False),
        weight_grad=getattr(args, "weight_grad", None), head_weight_grad=getattr(args, "head_weight_grad", "auto"),
        first_weight_grad=getattr(args, "first_weight_grad", "split"), partition=getattr(args, "partition", None))
    kw.update(overrides)
    return RunConfig(**kw)


def check_run_size(cfg: RunConfig, group) -> None:
    """Before anything is built: the run within this host's memory (obscura_jax.cli.
    capacity, from the model config alone; JAX has started, its backend decides) and
    a user's model module to the unit contract (obscura_jax.cli.blame)."""
    import jax  # lazy: JAX starts after the devices are chosen
    model = cfg.model_config()
    cfg.check_layout(model)      # a layout the model cannot run (cuDNN off a GPU, T not dividing heads) first
    check_host_memory(model, cfg.optimizer, cfg.micro_batch_size, cfg.seq_len, cfg.microbatches or 1,
                      platform=jax.default_backend(), state=group.size == 1, kept=lambda: kept_bytes(cfg, model))
    check_user_model(model, cfg.seq_len, max(cfg.micro_batch_size // cfg.data_parallel, 1))


def weight_decay(args) -> float:
    """--weight-decay (adamw's; 0.01 unless given): refused with adam or sgd, which take none."""
    if args.weight_decay is None:
        return 0.01 if args.optimizer == "adamw" else 0.0
    if args.optimizer != "adamw" and args.weight_decay != 0:
        raise UsageError(f"--weight-decay applies to adamw only; --optimizer {args.optimizer} takes none")
    return args.weight_decay


def _given(args, name: str, default):
    value = getattr(args, name, None)
    return default if value is None else value


def layout_width(args) -> int:
    """Devices per pipeline device (data x tensor), known without JAX."""
    return max(_given(args, "data_parallel", 1), 1) * max(_given(args, "tensor_parallel", 1), 1)


def choose_devices(args, num_stages: int):
    """Call BEFORE importing JAX; returns a function num_stages -> Placement.
    `num_stages`: the devices the run needs (pipeline devices x data x tensor)."""
    platform, count = parse_devices(args.devices, num_stages)
    stage_devices = None
    if args.stage_devices and layout_width(args) > 1:
        raise UsageError("--stage-devices places one device per stage: it does not combine with "
                         "--data-parallel or --tensor-parallel (stage meshes take consecutive devices)")
    if args.stage_devices:
        from obscura_jax.runtime.placement import parse_stage_devices  # lazy: placement starts JAX
        stage_devices = parse_stage_devices(args.stage_devices, num_stages)

    def place(p: int):
        from obscura_jax.runtime.placement import place_stages  # lazy: JAX starts here, devices chosen
        return place_stages(p, platform, count, stage_devices)
    return place
