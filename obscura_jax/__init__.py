"""obscura-jax runtime: stage placement, pipeline engine, host swapping, CLI, training.

Public API (names load on first use, so `import obscura_jax` starts no JAX and
`cpu_devices` can still choose the emulated device count):

    import obscura_jax
    obscura_jax.cpu_devices(4)                       # before any JAX computation
    run = obscura_jax.RunConfig(model="llama2-tiny", schedule="obscura", adjusted=1, steps=3)
    result = obscura_jax.train(run)                  # -> TrainResult
    result.losses, result.summary, result.timeline, result.check()["equal"]

  cpu_devices(n)       emulate n CPU devices (obscura_jax.devices)
  RunConfig            one training run; schedule = generator name | JSON path | Schedule
  train(run)           run it: TrainResult (summary dict, losses, measured and simulated
                       timelines, params(), report(), check(), gantt(path))
  make_pipeline(model, schedule, ...)   the engine's Pipeline, order/partition/batch
                       shape derived from the schedule and the model (obscura_jax.api)
  summarize(outcome)   the JSON-ready summary `obscura train --json` writes
  measure_stage(model, unit_range, policy)   one stage program's fwd/bwd time and
                       residual bytes under a policy (jax.checkpoint experiments)
  profile_model(model, seq_len, micro_batch) a measured planner profile
Models of your own: models.register_family / models.register_config; schedules:
the `schedules` package; plans: the `planner` package. See docs/api.md.
"""
from models import lazy_attributes

__version__ = "0.1.0"

_EXPORTS = {
    "cpu_devices": "obscura_jax.devices", "RunConfig": "obscura_jax.run.run_config",
    "train": "obscura_jax.api", "TrainResult": "obscura_jax.api", "make_pipeline": "obscura_jax.api",
    "summarize": "obscura_jax.api", "placement_for": "obscura_jax.api",
    "measure_stage": "obscura_jax.api", "profile_model": "obscura_jax.api",
    "ObscuraError": "models.errors",
}

__all__ = sorted(_EXPORTS) + ["__version__"]
__getattr__ = lazy_attributes("obscura_jax", _EXPORTS)
