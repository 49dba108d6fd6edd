"""What the processes of a run, and a run and the checkpoint it resumes, must agree on.

    identity_of   what a checkpoint must share with a run resuming it
    agreed        the run's settings every process must share
    check_order   one schedule, issue order, transfer plan and settings on every process
                  (hashed: a cross-process transfer issued out of order swaps data or hangs)
"""
from __future__ import annotations

import dataclasses

import jax

from obscura_jax.processes.process_group import SINGLE, ProcessGroup
from obscura_jax.run.run_config import RunConfig
from obscura_jax.runtime.messages import order_digest, transfer_plan


def identity_of(run: RunConfig, partition, schedule, group: ProcessGroup = SINGLE) -> dict:
    """What a checkpoint must share with a run resuming it (the schedule may differ)."""
    cfg = run.model_config()
    return {"model": run.model, "units": [list(r) for r in partition], "stages": len(partition),
            "processes": group.size, "seed": run.seed, "data": run.data, "data_dtype": run.data_dtype,
            "micro_batch_size": run.micro_batch_size, "seq_len": run.seq_len,
            "microbatches": schedule.num_microbatches, "compute_dtype": cfg.compute_dtype,
            "param_dtype": cfg.param_dtype, "optimizer": [run.optimizer, run.learning_rate, run.weight_decay],
            "layout": {"data": run.data_parallel, "tensor": run.tensor_parallel}}


def agreed(run: RunConfig) -> dict:
    """The run's settings every process must share (paths may differ between hosts)."""
    fields = dataclasses.asdict(run)
    fields.pop("checkpoint_dir")
    return fields


def check_order(pipe, group: ProcessGroup, what: str, extra: dict) -> None:
    """Every process must hold the same schedule, issue order and transfer plan (a
    cross-process transfer issued out of order swaps data or hangs) and run the same
    settings (`extra`): compare their hash; a difference is a one-line error on every
    process."""
    ex = pipe.executor
    process_of = [d.process_index for d in pipe.placement.devices]
    plan = getattr(ex.transport, "plan", None)
    if plan is None:
        plan = transfer_plan(ex.order, ex.routes, process_of)
    digest, summary = order_digest(pipe.schedule, ex.order, plan, process_of, pipe.boundary_specs,
                                   {**extra, "jax": jax.__version__})
    group.agree(what, digest, summary)
