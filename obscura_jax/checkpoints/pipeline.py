"""Orbax checkpoints of a pipeline's training state: per-stage params and optimizer
state, plus the data position (the step) and the run's identity.

Every save goes to a new step directory; Orbax writes it under a temporary name and
renames it when complete (a killed save leaves only that temporary directory, which
the next run removes), and older steps are kept (the newest `keep`) until a newer
one is complete, so a run that fails never damages an existing checkpoint. A fresh
run refuses a directory that already holds checkpoints (pass resume); a resume must
share the run's identity, stage and process counts included.

One process: `PipelineCheckpointer` saves the per-stage trees as they are. Several
processes: `obscura_jax.checkpoints.packed.PackedCheckpointer`, a different scheme
because Orbax (0.12) refuses, in a multi-process job, every array that one process
holds whole ("Cannot serialize host local jax.Array", checked again with this class
on 2 processes), and a stage's state on its one device is exactly that. The scheme
chosen: ONE checkpoint of ONE global array, each device's row holding its stages'
state as bytes, saved by all processes together, so Orbax's own commit protocol (a
step exists only once every process has written) still makes saves atomic; gathering
the model to process 0 or per-process directories were rejected (details there).
`obscura_jax.checkpoints.checkpointer.open_checkpointer` picks the one for the run's ProcessGroup.
"""
from __future__ import annotations

import logging
import sys
import warnings
from pathlib import Path
from typing import Any

import jax
from obscura_jax.checkpoints.directory import warn
from obscura_jax.errors import RunError

# Fields that must match between the checkpoint and the run resuming it. The
# schedule may differ: every schedule computes the same math.
IDENTITY_FIELDS = ("model", "stages", "processes", "units", "seed", "data", "data_dtype", "micro_batch_size",
                   "seq_len", "microbatches", "compute_dtype", "param_dtype", "optimizer", "layout")
# What checkpoints written before a field existed mean by it.
IDENTITY_DEFAULTS = {"processes": 1, "layout": {"data": 1, "tensor": 1}}


def newest_readable(ckpt, identity: dict) -> int | None:
    """The newest step whose metadata reads and belongs to this run (a checkpoint of
    another run is an error; an unreadable one is skipped with one warning line)."""
    if not ckpt.resume:
        return None
    steps = sorted(ckpt.manager.all_steps(), reverse=True)
    for i, step in enumerate(steps):
        try:
            meta = ckpt.meta(step)
        except Exception as e:  # noqa: BLE001  a damaged step: fall back to the one before
            skip_damaged(ckpt, step, steps[i + 1] if i + 1 < len(steps) else None, e)
            continue
        check_identity(ckpt.directory, meta.get("identity", {}), identity)
        ckpt.check_format(meta)
        return int(meta["step"])
    return None


def skip_damaged(ckpt, step: int, previous: int | None, error: BaseException) -> None:
    text = str(error).strip().splitlines()
    then = f"using step {previous}" if previous is not None else "no older step: starting from scratch"
    warn(f"checkpoint step {step} in {ckpt.directory} is damaged ({type(error).__name__}"
         f"{': ' + text[0][:120] if text else ''}); {then}")


def orbax_restore(manager, step: int, args):
    """`manager.restore(step, args=args)`. A restore that fails part-way (a damaged
    step) leaves Orbax's other per-array reads behind, and each reports itself: reads
    still in flight on TensorStore's threads post to Orbax's closed event loop
    ("RuntimeError: Event loop is closed", through sys.excepthook), their futures'
    errors go to the asyncio logger, their coroutines print when collected or warn
    that they were never awaited: 6,612 lines on stderr after the one warning line, for
    one damaged llama2-tiny step. Those reports are dropped from the first restore on
    (_drop_restore_leftovers): the caller reports the failure in one line (skip_damaged)."""
    _drop_restore_leftovers()
    return manager.restore(step, args=args)


_READ = "_read_array_index_and_device_put"     # Orbax's per-array read coroutine


def _restore_leftover(exc, obj=None) -> bool:
    return (isinstance(exc, RuntimeError) and str(exc) == "Event loop is closed") or (
        getattr(obj, "__qualname__", "") == _READ)


class _NoUnretrievedFutures(logging.Filter):
    def filter(self, record) -> bool:
        return "exception was never retrieved" not in record.getMessage()    # a Future's, Task's, gather's


def _drop_restore_leftovers() -> None:
    """Wrap sys.excepthook and sys.unraisablehook to drop a failed restore's leftovers
    (_restore_leftover) and pass everything else on; the asyncio logger's unretrieved
    future errors and the never-awaited warning of Orbax's read are dropped too. Once
    a process."""
    if getattr(sys.excepthook, "drops_restore_leftovers", False):
        return
    excepthook, unraisablehook = sys.excepthook, sys.unraisablehook

    def on_exception(kind, value, tb):
        if not _restore_leftover(value):
            excepthook(kind, value, tb)

    def on_unraisable(u):
        if not _restore_leftover(u.exc_value, u.object):
            unraisablehook(u)
    on_exception.drops_restore_leftovers = True
    sys.excepthook, sys.unraisablehook = on_exception, on_unraisable
    logging.getLogger("asyncio").addFilter(_NoUnretrievedFutures())
    warnings.filterwarnings("ignore", message=f"coroutine '{_READ}' was never awaited")


def check_identity(directory, saved: dict, identity: dict) -> None:
    """One line naming the first field a resumed run does not share."""
    for key in IDENTITY_FIELDS:
        if key not in identity:
            continue
        if key not in saved and key not in IDENTITY_DEFAULTS:
            continue   # a checkpoint written before the field was recorded
        have, want = saved.get(key, IDENTITY_DEFAULTS.get(key)), _jsonable(identity[key])
        if key == "stages" and have is None:
            have = len(saved.get("units", []))
        if have != want:
            what = {"processes": "process count", "stages": "stage count"}.get(key, key)
            if key == "layout":
                have, want = (f"{v['data']} data x {v['tensor']} tensor" for v in (have, want))
            raise RunError(f"cannot resume {directory}: checkpoint has {what} {have!r}, this run has {want!r}")


def _quiet_absl() -> None:
    try:
        from absl import logging as absl_logging  # lazy: comes with orbax, below
        absl_logging.set_verbosity(absl_logging.WARNING)
    except ImportError:
        pass


class PipelineCheckpointer:
    def __init__(self, directory: str | Path, *, resume: bool, keep: int = 2):
        import orbax.checkpoint as ocp  # lazy: orbax takes ~1 s to load, runs without checkpoints skip it

        _quiet_absl()
        self._ocp = ocp
        self.directory = Path(directory).absolute()
        if self.directory.exists() and not self.directory.is_dir():
            raise RunError(f"checkpoint dir {directory} is not a directory")
        self.manager = ocp.CheckpointManager(
            self.directory, options=ocp.CheckpointManagerOptions(max_to_keep=keep, create=True,
                                                                 cleanup_tmp_directories=True))
        steps = sorted(self.manager.all_steps())
        if steps and not resume:
            raise RunError(f"checkpoint dir {directory} already holds steps {steps}: pass --resume "
                             "to continue it, or choose another dir")
        self.resume = resume

    def latest_step(self) -> int | None:
        return self.manager.latest_step()

    def meta(self, step: int) -> dict:
        ocp = self._ocp
        return self.manager.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))["meta"]

    def check_format(self, meta: dict) -> None:
        if meta.get("format") == "obscura-packed/1":
            raise RunError(f"cannot resume {self.directory}: it was written by a run of several processes")

    def resumable_step(self, identity: dict) -> int | None:
        """The step to resume from (None: start fresh), after checking that the
        checkpoint belongs to this run. Reads metadata only: cheap, before compiling."""
        return newest_readable(self, identity)

    def steps_before(self, step: int) -> list[int]:
        return sorted((s for s in self.manager.all_steps() if s < step), reverse=True)

    def restore(self, like_state: Any, step: int) -> Any:
        """The state saved at `step`, placed like `like_state` (same tree, devices)."""
        ocp = self._ocp
        abstract = jax.tree.map(
            lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=a.sharding), like_state)
        restored = orbax_restore(self.manager, step, ocp.args.Composite(state=ocp.args.StandardRestore(abstract)))
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
        if getattr(self, "lock", None) is not None:
            self.lock.release()
            self.lock = None


def _jsonable(value):
    if isinstance(value, tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    return value
