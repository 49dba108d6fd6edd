"""Measure one transformer layer (attention unit + MLP unit, built with the project's
own models.build_stage over units [1, 3) of a one-layer config) on the current JAX
device, for the layout sweep (format of measured.py).

Per (model shape, seq, attention, micro-batch) the forward is compiled and timed
once (it does not depend on the policy); per policy the forward+backward program
(jax.vjp, pullback applied to a cotangent; it returns the layer output as well, so
no forward work is dead code) is compiled ahead of time, its XLA temp size read
from `memory_analysis()` (recorded for information: XLA may fuse saved activations
away inside one fused program, so it is not the engine's footprint), and timed. bwd_time = fwd+bwd - fwd. Residual
bytes per micro-batch come from models.info.unit_residual_bytes (the leaves jax.vjp
keeps, traced abstractly). Failures that say RESOURCE_EXHAUSTED / out of memory are
recorded as "oom"; anything else as "failed" with its first line.

Device time is scarce, so the grid is measured in priority tiers and stops starting
new work when the time budget is spent (the rest is recorded as "skipped"):
  1. cuDNN attention, micro-batch 1, policies none and full
  2. cuDNN, micro-batch 1, the other policies
  3. XLA attention, micro-batch 1, none and full (the kernel comparison)
  4. cuDNN, micro-batches > 1, none and full
  5. XLA, micro-batch 1, the other policies
  6. XLA, micro-batches > 1, none and full
  7. (--full-grid only) the other policies at micro-batches > 1
On the H200 the first policy of a new (shape, seq, micro-batch) costs ~8-12 s
(forward and forward+backward compiles, GEMM autotuning), each further policy 1-3 s:
with the default 210 s budget tiers 1-3 and most of 4 fit. The sweep derives the
missing points from these (measured.py, rules A and B).
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import jax
import jax.numpy as jnp

import models
from models.info import unit_residual_bytes
from planner.layouts.measured import layer_key
from obscura_jax.profiling.stopwatch import median_time

POLICY_ORDER = ("none", "full", "selective", "mlp", "cmb")
ANCHORS = ("none", "full")


@dataclass(frozen=True)
class Task:
    model: str
    seq_len: int
    attention: str
    micro_batch: int
    policy: str


def plan_tasks(models_: tuple[str, ...], seq_lens, micro_batches, attentions, policies,
               full_grid: bool = False) -> list[Task]:
    """All (model, seq, attention, mbs, policy) in the priority order above."""
    mbs1 = [b for b in micro_batches if b == 1]
    more = [b for b in micro_batches if b != 1]
    anchors = [p for p in POLICY_ORDER if p in policies and p in ANCHORS]
    others = [p for p in POLICY_ORDER if p in policies and p not in ANCHORS]
    atts = [a for a in ("cudnn", "xla") if a in attentions]
    first, rest = atts[:1], atts[1:]
    tiers = [(a, mbs1, anchors) for a in first] + [(a, mbs1, others) for a in first]
    tiers += [(a, mbs1, anchors) for a in rest] + [(a, more, anchors) for a in first]
    tiers += [(a, mbs1, others) for a in rest] + [(a, more, anchors) for a in rest]
    if full_grid:
        tiers += [(att, more, others) for att in ("cudnn", "xla") if att in attentions]
    tasks = []
    for att, batches, pols in tiers:
        for b in batches:
            for m in models_:
                for s in seq_lens:
                    tasks += [Task(m, s, att, b, p) for p in pols]
    return tasks


def _is_oom(err: BaseException) -> bool:
    text = str(err)
    return "RESOURCE_EXHAUSTED" in text or "out of memory" in text.lower() or "OOM" in text


def _timed(fn, args, min_sample_seconds: float = 0.02) -> float:
    """Median seconds per call over 3 samples of back-to-back calls lasting ~20 ms."""
    return median_time(lambda: fn(*args), 3, min_sample_seconds=min_sample_seconds)


def matmul_tflops(n: int, dtype) -> float:
    """Achieved rate of one n^3 matmul through jax.jit, measured in this run."""
    a = jax.random.normal(jax.random.key(1), (n, n), jnp.float32).astype(dtype)
    b = jax.random.normal(jax.random.key(2), (n, n), jnp.float32).astype(dtype)
    f = jax.jit(lambda a, b: a @ b)
    return 2 * n ** 3 / _timed(f, (a, b), min_sample_seconds=0.05) / 1e12


class LayerBench:
    """Holds per-shape params and compiled forwards between tasks."""

    def __init__(self, configs: dict, log=print):
        self.configs = configs              # model name -> one-layer ModelConfig
        self.log = log
        self._params: dict = {}
        self._fwd: dict = {}

    def _cfg(self, task: Task):
        return self.configs[task.model].replace(attention_impl=task.attention)

    def _inputs(self, task: Task):
        cfg = self._cfg(task)
        if task.model not in self._params:
            self._params[task.model] = models.init_params(cfg, 0, unit_range=(1, 3))
        # random, not constant, data: GEMMs on zeros run measurably faster on the H200.
        # (numpy generation was tried: seconds per 8k activation, slower than jax's.)
        dtype = jnp.dtype(cfg.compute_dtype)
        k1, k2 = jax.random.split(jax.random.key(task.seq_len * 7 + task.micro_batch))
        shape = (task.micro_batch, task.seq_len, cfg.hidden)
        x = jax.random.normal(k1, shape, jnp.float32).astype(dtype)
        dy = (jax.random.normal(k2, shape, jnp.float32) * 0.01).astype(dtype)
        return cfg, self._params[task.model], x, dy

    def _forward_time(self, task: Task, cfg, params, x) -> float:
        key = (task.model, task.seq_len, task.attention, task.micro_batch)
        if key not in self._fwd:
            stage = models.build_stage(cfg, (1, 3), "none")
            self._fwd[key] = _timed(jax.jit(stage.apply), (params, x))
        return self._fwd[key]

    def measure(self, task: Task) -> dict:
        cfg, params, x, dy = self._inputs(task)
        stage = models.build_stage(cfg, (1, 3), task.policy)

        def fwd_bwd(p, x, dy):
            # Return y too, as a pipeline stage does: otherwise XLA drops the forward
            # work whose only consumer is the output (the last GEMM; under `full` or
            # `mlp` the whole MLP forward), and the recompute would look free.
            y, pullback = jax.vjp(stage.apply, p, x)
            return y, pullback(dy)

        fwd = self._forward_time(task, cfg, params, x)
        compiled = jax.jit(fwd_bwd).lower(params, x, dy).compile()
        analysis = compiled.memory_analysis()
        temp = getattr(analysis, "temp_size_in_bytes", None) if analysis is not None else None
        both = _timed(compiled, (params, x, dy))
        residual = sum(unit_residual_bytes(cfg, k, task.policy, task.seq_len, task.micro_batch)
                       for k in ("attn", "mlp"))
        return {"status": "measured", "fwd_time": fwd, "fwd_bwd_time": both,
                "bwd_time": max(both - fwd, 0.0), "residual_bytes": residual,
                "temp_bytes": int(temp) if temp is not None else None}

    def is_new_shape(self, task: Task) -> bool:
        return (task.model, task.seq_len, task.attention, task.micro_batch) not in self._fwd

    def forget(self, task: Task) -> None:
        """Drop compiled forwards of this shape (after an OOM, free what we can)."""
        self._fwd.pop((task.model, task.seq_len, task.attention, task.micro_batch), None)


def run_bench(configs: dict, tasks: list[Task], budget_s: float, log=print,
              on_entry=None) -> list[dict]:
    """Measure `tasks` in order while they fit in `budget_s` seconds; every task gets
    an entry (measured / oom / failed / skipped). A task starts only if its expected
    duration fits what is left: the mean of earlier tasks of its kind (the first of a
    new shape compiles the forward too, ~10 s on the H200; another policy of a known
    shape ~1-2 s). `on_entry(entries)` runs after each task (the script saves the file
    there, so a killed run keeps what it measured)."""
    bench = LayerBench(configs, log)
    keys = {name: layer_key(cfg) for name, cfg in configs.items()}
    start = time.perf_counter()
    entries = []
    on_gpu = jax.default_backend() == "gpu"
    seen = {True: [10.0 if on_gpu else 2.0], False: [2.0 if on_gpu else 1.0]}   # priors
    for i, task in enumerate(tasks):
        entry = {"model": task.model, "layer": keys[task.model], "seq_len": task.seq_len,
                 "micro_batch": task.micro_batch, "attention": task.attention,
                 "policy": task.policy}
        elapsed = time.perf_counter() - start
        new = bench.is_new_shape(task)
        expected = statistics.mean(seen[new])
        if task.attention == "cudnn" and not on_gpu:
            entry.update(status="skipped", note="cudnn attention needs a GPU")
        elif elapsed + expected > budget_s:
            entry.update(status="skipped", note=f"time budget {budget_s:.0f} s: {elapsed:.0f} s "
                                                f"spent, ~{expected:.0f} s needed")
        else:
            t0 = time.perf_counter()
            try:
                entry.update(bench.measure(task))
            except Exception as e:  # record and carry on: one bad shape must not lose the rest
                first = (str(e).strip().splitlines() or [type(e).__name__])[0][:300]
                entry.update(status="oom" if _is_oom(e) else "failed", note=first)
                bench.forget(task)
            seen[new].append(time.perf_counter() - t0)
        entries.append(entry)
        if on_entry is not None:
            on_entry(entries)
        if entry["status"] == "measured":
            log(f"[{time.perf_counter() - start:6.1f}s] {i + 1}/{len(tasks)} {task.model} seq "
                f"{task.seq_len} {task.attention} mbs {task.micro_batch} {task.policy}: fwd "
                f"{entry['fwd_time'] * 1e3:.2f} ms bwd {entry['bwd_time'] * 1e3:.2f} ms residual "
                f"{entry['residual_bytes'] / 2 ** 20:.2f} MiB temp "
                f"{(entry['temp_bytes'] or 0) / 2 ** 20:.2f} MiB")
        else:
            log(f"[{time.perf_counter() - start:6.1f}s] {i + 1}/{len(tasks)} {task.model} seq "
                f"{task.seq_len} {task.attention} mbs {task.micro_batch} {task.policy}: "
                f"{entry['status']} ({entry.get('note', '')})")
    return entries
