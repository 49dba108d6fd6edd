"""Orbax checkpoints of a pipeline's training state: per-stage params and optimizer
state, plus the data position (the step) and the run's identity.

Every save goes to a new step directory; Orbax writes it under a temporary name and
renames it when complete, and older steps are kept (the newest `keep`) until a
newer one is complete, so a run that fails never damages an existing checkpoint.
A fresh run refuses a directory that already holds checkpoints (pass resume).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import jax

# Fields that must match between the checkpoint and the run resuming it. The
# schedule may differ: every schedule computes the same math.
IDENTITY_FIELDS = ("model", "units", "seed", "data", "micro_batch_size", "seq_len", "microbatches",
                   "optimizer")


def _quiet_absl() -> None:
    try:
        from absl import logging as absl_logging
        absl_logging.set_verbosity(absl_logging.WARNING)
    except ImportError:
        pass


class PipelineCheckpointer:
    def __init__(self, directory: str | Path, *, resume: bool, keep: int = 2):
        import orbax.checkpoint as ocp

        _quiet_absl()
        self._ocp = ocp
        self.directory = Path(directory).absolute()
        if self.directory.exists() and not self.directory.is_dir():
            raise ValueError(f"checkpoint dir {directory} is not a directory")
        self.manager = ocp.CheckpointManager(
            self.directory, options=ocp.CheckpointManagerOptions(max_to_keep=keep, create=True))
        steps = sorted(self.manager.all_steps())
        if steps and not resume:
            raise ValueError(f"checkpoint dir {directory} already holds steps {steps}: pass --resume "
                             "to continue it, or choose another dir")
        self.resume = resume

    def latest_step(self) -> int | None:
        return self.manager.latest_step()

    def resumable_step(self, identity: dict) -> int | None:
        """The step to resume from (None: start fresh), after checking that the
        checkpoint belongs to this run. Reads metadata only: cheap, before compiling."""
        step = self.manager.latest_step() if self.resume else None
        if step is None:
            return None
        ocp = self._ocp
        meta = self.manager.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))["meta"]
        saved = meta.get("identity", {})
        for key in IDENTITY_FIELDS:
            if key in identity and saved.get(key) != _jsonable(identity[key]):
                raise ValueError(f"cannot resume {self.directory}: checkpoint has {key}="
                                 f"{saved.get(key)!r}, this run has {_jsonable(identity[key])!r}")
        return int(meta["step"])

    def restore(self, like_state: Any, step: int) -> Any:
        """The state saved at `step`, placed like `like_state` (same tree, devices)."""
        ocp = self._ocp
        abstract = jax.tree.map(
            lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=a.sharding), like_state)
        restored = self.manager.restore(step, args=ocp.args.Composite(state=ocp.args.StandardRestore(abstract)))
        return jax.tree.unflatten(jax.tree.structure(like_state), jax.tree.leaves(restored["state"]))

    def save(self, step: int, state: Any, identity: dict, extra: dict | None = None) -> None:
        ocp = self._ocp
        meta = {"step": int(step), "identity": {k: _jsonable(v) for k, v in identity.items()}}
        meta.update(extra or {})
        self.manager.save(step, args=ocp.args.Composite(state=ocp.args.StandardSave(state),
                                                        meta=ocp.args.JsonSave(meta)))
        self.manager.wait_until_finished()

    def close(self) -> None:
        self.manager.close()


def _jsonable(value):
    if isinstance(value, tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    return value
