"""The sizes a run asks for, bounded before anything is built by what the host and
the devices can hold (docs/cli.md, "Sizes"): one line with the bytes, exit 2,
instead of minutes of allocation, a memory blow-up or an "internal error".

- Devices and processes (`check_device_count`, before JAX starts): `--devices
  cpu:N` may emulate at most the devices the run uses (pipeline devices x data x
  tensor; every emulated device costs host memory and threads, and more would sit
  idle); `--processes N` x `--devices-per-process K` may not exceed them either
  (every process runs a stage).
- Host memory (`check_host_memory`, computed from the model config alone: its
  parameter count from abstract shapes, one unit kind at a time, so 10^9 layers
  cost nothing to count): every step's token batch (inputs and targets) is built
  on the host; on CPU, where the devices are host memory, the training state
  (params, grads and the optimizer's state), one micro-batch's unit inputs (what
  every unit keeps of a micro-batch in flight even when it recomputes everything)
  and its logits (float32, the head's largest activation) must fit in it too. The
  host's memory is its physical memory, or less where the process runs under a
  cgroup limit or an address-space limit (`ulimit -v`).

A lower bound, not a prediction: passing it says nothing about the devices' own
memory, which `train` judges per device where it is asked to (docs/cli.md).
"""
from __future__ import annotations

import os
import resource

from models.registry import get_family
from obscura_jax.errors import UsageError
from schedules.sizes import format_bytes

TOKEN_BYTES = 4          # int32 token ids
LOGIT_BYTES = 4          # the cross-entropy runs in float32
_CGROUP_LIMITS = ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes")


def host_memory_bytes() -> int:
    """This host's memory: physical pages x page size, or the cgroup's or the
    process's address-space limit when lower."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    soft = resource.getrlimit(resource.RLIMIT_AS)[0]
    if soft != resource.RLIM_INFINITY and 0 < soft < total:
        total = soft
    for path in _CGROUP_LIMITS:
        try:
            with open(path) as f:
                text = f.read().strip()
        except OSError:
            continue
        if text.isascii() and text.isdigit() and 0 < int(text) < total:
            total = int(text)
    return total


def check_device_count(devices: str | None, needed: int, width: int, processes: int = 1,
                       devices_per_process: int = 1) -> None:
    """Emulated CPU devices and local processes within the devices the run uses
    (`needed` pipeline devices x `width` = data x tensor)."""
    uses = needed * width
    layout = f"{needed} pipeline x {width} data x tensor" if width > 1 else f"{needed} pipeline devices"
    if devices and devices.startswith("cpu:") and devices[4:].isascii() and devices[4:].isdigit() \
            and int(devices[4:]) > uses:
        raise UsageError(f"--devices {devices}: the run uses {uses} devices ({layout}); more emulated devices "
                         "would sit idle, each holding host memory and threads")
    if processes > 1 and processes * devices_per_process > uses:
        raise UsageError(f"--processes {processes} x --devices-per-process {devices_per_process} = "
                         f"{processes * devices_per_process} devices, but the run uses {uses} ({layout}): "
                         "every process must run a stage")


def check_host_memory(cfg, optimizer: str, micro_batch: int, seq_len: int, microbatches: int = 1,
                      platform: str = "cpu", state: bool = True, units: int | None = None,
                      kept=None, memory: int | None = None) -> None:
    """One line with the bytes when the run cannot fit this host (module docstring).
    `cfg`: the models.ModelConfig; `state`: count the training state on CPU (a run
    alone on this host; a process of several holds a share); `units`: how many
    units hold a micro-batch at once (default: all of the model's); `kept`: a
    function -> the bytes one micro-batch keeps over those units under the run's
    recompute policies (`kept_bytes`), where known (default: their inputs alone)."""
    memory = host_memory_bytes() if memory is None else memory
    have = f"this host's {format_bytes(memory)} of memory"
    batch = 2 * microbatches * micro_batch * seq_len * TOKEN_BYTES
    if batch > memory:
        raise UsageError(f"one step's tokens ({microbatches} micro-batch{'es' * (microbatches != 1)} x {micro_batch} "
                         f"rows x {seq_len} tokens, inputs and targets) take {format_bytes(batch)}, more than {have}")
    if platform != "cpu":
        return
    params, held = training_state(cfg, optimizer) if state else (0, 0)
    if held > memory:
        raise UsageError(f"{cfg.name} ({cfg.num_layers} layers, {params:,} params) needs {format_bytes(held)} for "
                         f"its params, grads and {optimizer} state alone on CPU ({held:,} bytes), more than "
                         f"{have} ({memory:,} bytes)")
    units = cfg.num_units if units is None else units
    logits = micro_batch * seq_len * cfg.vocab_size * LOGIT_BYTES
    inputs = micro_batch * seq_len * (TOKEN_BYTES + (units - 1) * cfg.hidden * cfg.compute_bytes)
    if held + logits + inputs > memory:
        raise UsageError(f"one micro-batch of {micro_batch} x {seq_len} tokens takes {format_bytes(logits + inputs)} "
                         f"on CPU ({format_bytes(logits)} of float32 logits over {cfg.vocab_size} tokens, "
                         f"{format_bytes(inputs)} of inputs kept by {units} unit{'s' * (units != 1)})"
                         + (f" besides {format_bytes(held)} of training state" if held else "")
                         + f", more than {have}")
    residuals = kept() if kept is not None else 0
    if held + residuals > memory:
        raise UsageError(f"one micro-batch of {micro_batch} x {seq_len} tokens keeps {format_bytes(residuals)} over "
                         f"the model's units on CPU under the run's recompute policies"
                         + (f" besides {format_bytes(held)} of training state" if held else "")
                         + f", more than {have} (recompute more: --policy, --adjusted)")


def kept_bytes(run, cfg) -> int:
    """What one micro-batch keeps over all of the model's units under `run`'s
    recompute policies (a obscura_jax.run.RunConfig): each unit's residual, traced
    (models.info; nothing allocated). A layer-granular stage counts as `full`."""
    from models.info import unit_residual_bytes  # lazy (these two): tracing loads JAX
    from obscura_jax.runtime.pipeline import stage_policies

    schedule, partition = run.resolve(cfg)
    layer = get_family(cfg.family).layer_kinds
    cache: dict = {}
    total = 0
    for (a, b), pol in zip(partition, stage_policies(cfg, schedule, run.policy)):
        pol = "full" if pol.layer else pol
        for kind, count in unit_counts(a, b, cfg.num_units, layer).items():
            key = (kind, repr(pol))
            if key not in cache:
                cache[key] = unit_residual_bytes(cfg, kind, pol, run.seq_len, run.micro_batch_size)
            total += count * cache[key]
    return total


def unit_counts(a: int, b: int, num_units: int, layer: tuple[str, ...]) -> dict[str, int]:
    """How many units of each kind the range [a, b) holds (arithmetic: a model of
    10^9 layers is never listed)."""
    out = {"embed": int(a == 0), "head": int(b == num_units)}
    lo, hi = max(a, 1) - 1, min(b, num_units - 1) - 1      # layer units 1..num_units-2, counted from 0
    period = len(layer)
    below = lambda n, j: max(0, (n - j + period - 1) // period)  # noqa: E731  x in [0, n) with x % period == j
    for j, kind in enumerate(layer):
        out[kind] = max(0, below(hi, j) - below(lo, j))
    return {k: v for k, v in out.items() if v}


def training_state(cfg, optimizer: str) -> tuple[int, int]:
    """(parameter count, bytes of params + grads + optimizer state), from abstract
    shapes one unit kind at a time (nothing allocated)."""
    import jax  # lazy (these three): counting loads JAX, after the devices are chosen
    from models.units import abstract_unit_params, tree_bytes, tree_size
    from obscura_jax.runtime.executor import make_optimizer  # lazy: the engine's own optimizer

    opt = make_optimizer(optimizer, 1e-3, 0.01 if optimizer == "adamw" else 0.0)
    layer = get_family(cfg.family).layer_kinds
    count = held = 0
    for kind in get_family(cfg.family).kinds:
        params = abstract_unit_params(cfg, kind)
        times = cfg.num_layers if kind in layer else 1
        count += times * tree_size(params)
        held += times * (2 * tree_bytes(params) + tree_bytes(jax.eval_shape(opt.init, params)))
    return count, held
