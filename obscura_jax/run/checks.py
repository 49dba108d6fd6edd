"""`obscura train --check`: the run against the unpipelined model on one device.

Tolerances: losses within rtol (1e-5 for fp32 compute). Parameters within rtol plus
an absolute term for adaptive optimizers: Adam divides each update by the root of
the gradient's second moment, so an element whose gradient is at rounding-noise
level moves by O(lr) in a direction set by that noise, and summing m micro-batch
gradients instead of one batch gradient changes the noise. The absolute term,
2% of lr per step, covers the usual drift; an element whose gradient is pure noise
can move by up to 2 lr per step and fails this check (the numerics tests exempt such
elements by their reference gradient: tests/obscura_jax/numerics_cases.adam_bound).
With SGD the absolute term is 1e-7.
"""
from __future__ import annotations

import jax
import numpy as np

import models
from obscura_jax.run.data import BatchShape, open_data
from obscura_jax.runtime.executor import make_optimizer
from obscura_jax.run.reference import reference_train


def tolerances(run, cfg) -> tuple[float, float]:
    rtol = 1e-5 if cfg.compute_dtype == "float32" and cfg.param_dtype == "float32" else 2e-2
    if run.optimizer == "sgd":
        return rtol, 1e-7
    return rtol, 0.02 * run.learning_rate * run.steps


def check_run(outcome, group) -> dict | None:
    """`--check` of `train` and `compare`: the run against the unpipelined model, on
    every process of `group` (each sends its stages' params to the leader). The
    check's record on the leader, None on the others."""
    from obscura_jax.processes.distributed import gather_params  # lazy: only checks gather params
    # the reference run compiles and trains on one device: a set-up sized allowance
    group.progress("checking against the unpipelined model")
    params = gather_params(outcome, group) if group.size > 1 else outcome.stage_params()
    return check_against_reference(outcome, params) if group.is_leader else None


def check_line(check: dict) -> str:
    """The check's one line in a report."""
    return (f"check vs unpipelined model: max loss rel diff {check['max_loss_rel_diff']:.2e}, "
            f"params max abs diff {check['params_max_abs_diff']:.2e} "
            f"({'equal' if check['equal'] else 'DIFFERENT'} at rtol {check['rtol']:.0e}, "
            f"atol {check['atol']:.1e})")


def check_against_reference(outcome, params: dict | None = None) -> dict:
    """`params`: the run's final params (default: this process's, the whole model
    in a single process)."""
    run, pipe = outcome.config, outcome.pipeline
    cfg = pipe.cfg
    shape = BatchShape(pipe.schedule.num_microbatches, run.micro_batch_size, run.seq_len)
    data = open_data(run.data, model_vocab=cfg.vocab_size, seed=run.seed, dtype=run.data_dtype)
    batches = [data.batch(i, shape) for i in range(run.steps)]
    optimizer = make_optimizer(run.optimizer, run.learning_rate, run.weight_decay)
    losses, params = reference_train(cfg, models.init_params(cfg, run.seed), batches, optimizer)
    rtol, atol = tolerances(run, cfg)
    ours = {s.step: s.loss for s in outcome.steps}
    loss_diff = max((abs(ours[k] - losses[k - 1]) / abs(losses[k - 1]) for k in ours), default=0.0)
    got = outcome.stage_params() if params is None else params
    ref = jax.device_get(params)
    worst, ok = 0.0, True
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(ref), strict=True):
        a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
        worst = max(worst, float(np.max(np.abs(a - b))))
        ok = ok and bool(np.allclose(a, b, rtol=rtol, atol=atol))
    return {"reference_losses": losses, "max_loss_rel_diff": loss_diff, "params_max_abs_diff": worst,
            "rtol": rtol, "atol": atol, "equal": bool(ok and loss_diff <= rtol)}
