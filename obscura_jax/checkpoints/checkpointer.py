"""The checkpointer of a run: one process's (obscura_jax.checkpoints.pipeline.PipelineCheckpointer)
or several processes' (obscura_jax.checkpoints.packed.PackedCheckpointer), holding
the checkpoint directory's lock until it is closed; and the restore a resumed run
starts from (`restore_with_fallback`)."""
from __future__ import annotations

from obscura_jax.checkpoints.pipeline import PipelineCheckpointer, skip_damaged
from obscura_jax.checkpoints.directory import DirectoryLock
from obscura_jax.errors import RunError, error_line
from obscura_jax.runtime.out_of_memory import DeviceOutOfMemory, detail_of, is_out_of_memory
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


def restore_with_fallback(ckpt, like: list, step: int, group) -> tuple[int | None, list | None]:
    """(step, trees) of the newest checkpoint from `step` down that restores on every
    process; a damaged one is skipped with one warning line (None, None: none left)."""
    candidates = [step] + ckpt.steps_before(step)
    for i, cand in enumerate(candidates):
        try:
            trees, failure = ckpt.restore(like, cand), None
        except RunError:
            raise
        except Exception as e:  # noqa: BLE001  a damaged step: every process falls back together
            if is_out_of_memory(e):     # the device, not the step: no fallback
                raise DeviceOutOfMemory(None, f"restoring checkpoint step {cand}", detail_of(e)) from None
            trees, failure = None, e
        failed = [f for f in group.gather("restore", None if failure is None else
                                          f"{type(failure).__name__}: {error_line(failure)}") if f]
        if not failed:
            return cand, trees
        if group.is_leader:
            skip_damaged(ckpt, cand, candidates[i + 1] if i + 1 < len(candidates) else None,
                         failure or RuntimeError(failed[0]))
    return None, None
