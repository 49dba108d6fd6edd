"""The checkpointer of a run: one process's (obscura_jax.checkpoints.pipeline.PipelineCheckpointer)
or several processes' (obscura_jax.checkpoints.packed.PackedCheckpointer), holding
the checkpoint directory's lock until it is closed."""
from __future__ import annotations

from obscura_jax.checkpoints.pipeline import PipelineCheckpointer
from obscura_jax.checkpoints.directory import DirectoryLock
from obscura_jax.errors import RunError
from obscura_jax.checkpoints.packed import PackedCheckpointer


def open_checkpointer(directory, resume: bool, group):
    """The checkpointer for a run of `group`'s processes (all of them call this),
    holding the directory's lock (taken by the leader; every process stops with the
    same line if another run holds it) until close()."""
    lock, refused = None, None
    if group.is_leader:
        try:
            lock = DirectoryLock(directory)
        except RunError as e:
            refused = str(e)
    refused = next((r for r in group.gather("checkpoint-lock", refused) if r), None)
    if refused:
        raise RunError(refused)
    try:
        if group.size == 1:
            ckpt = PipelineCheckpointer(directory, resume=resume)
        else:
            ckpt = PackedCheckpointer(directory, resume=resume, group=group)
    except BaseException:
        if lock is not None:
            lock.release()
        raise
    ckpt.lock = lock
    return ckpt
