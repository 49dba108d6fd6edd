"""Checkpoints of a run on several processes: ONE Orbax checkpoint of one global
array, each device's row holding its stages' training state as bytes.

Why not the single-process format (a tree of per-stage arrays) per process: in a
multi-process job Orbax 0.12 refuses every fully addressable jax.Array ("Cannot
serialize host local jax.Array"), and a stage's array on its one device is exactly
that; numpy leaves and JSON are written by process 0 alone; so per-process
checkpoint managers cannot work (found with Orbax 0.12 on CPU processes). What
Orbax does write across processes is a global array. So each device packs its
stages' leaves (params, optimizer state) into one uint8 row in one jitted program
(`bitcast_convert_type`, zero padding to the longest row), the rows form a global
[devices, row_bytes] array sharded over a 1-D mesh of every device, and every
process saves it together: Orbax writes each process's rows, process 0 writes the
metadata (step, identity, the byte layout of every row) and renames the step
directory only when all are done, so a killed save leaves no complete-looking
step behind (its temporary directory is removed by the next run).

Alternatives rejected: gathering all state to process 0 (a whole model on one host,
and through the coordination service); one directory per process written by hand
(loses Orbax's commit protocol, the atomicity the runtime promises). Cost: packing
copies a device's state once on that device while saving or restoring (fine on CPU;
on a big GPU stage, pack in chunks if memory is tight). Several hosts need one
directory they all see.

Restoring needs the same processes and stages (the identity check refuses others
with one line).
"""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from obscura_jax.checkpoints.pipeline import _jsonable, _quiet_absl, newest_readable, orbax_restore
from obscura_jax.errors import RunError


def _leaf_entry(stage: int, kind: int, index: int, leaf, offset: int) -> list:
    dtype = np.dtype(leaf.dtype)
    nbytes = int(np.prod(leaf.shape, dtype=np.int64)) * dtype.itemsize
    return [stage, kind, index, list(leaf.shape), dtype.name, offset, nbytes]


def row_layout(trees: dict[int, tuple]) -> list[list]:
    """[stage, part (0 params, 1 optimizer state), leaf index, shape, dtype, offset,
    nbytes] for every leaf of the stages on one device, in stage order."""
    entries, offset = [], 0
    for s in sorted(trees):
        for kind, tree in enumerate(trees[s]):
            for i, leaf in enumerate(jax.tree.leaves(tree)):
                entries.append(_leaf_entry(s, kind, i, leaf, offset))
                offset += entries[-1][-1]
    return entries


@lru_cache(maxsize=None)
def _packer(row_bytes: int, used: int):
    def pack(leaves):
        parts = [jax.lax.bitcast_convert_type(x.astype(jnp.uint8) if x.dtype == jnp.bool_ else x,
                                              jnp.uint8).reshape(-1) for x in leaves]
        return jnp.concatenate(parts + [jnp.zeros(row_bytes - used, jnp.uint8)])[None]
    return jax.jit(pack)


def _unpack(row, layout: list[list]) -> list:
    """uint8 [1, row_bytes] -> the leaves of `layout`, on the row's device."""
    def unpack(r):
        r, out = r[0], []
        for *_, shape, dtype, offset, nbytes in layout:
            dt = jnp.dtype(dtype)
            chunk = r[offset:offset + nbytes]
            if dt == jnp.bool_:
                out.append(chunk.reshape(shape).astype(jnp.bool_))
            elif dt.itemsize == 1:
                out.append(jax.lax.bitcast_convert_type(chunk, dt).reshape(shape))
            else:
                out.append(jax.lax.bitcast_convert_type(chunk.reshape(-1, dt.itemsize), dt).reshape(shape))
        return out
    return jax.jit(unpack)(row)


def _device_of(tree):
    (device,) = jax.tree.leaves(tree)[0].devices()
    return device


class PackedCheckpointer:
    """The PipelineCheckpointer interface (resumable_step, restore, save, close) for
    a ProcessGroup of several processes; every process calls each method together."""

    def __init__(self, directory: str | Path, *, resume: bool, group, keep: int = 2):
        import orbax.checkpoint as ocp  # lazy: orbax takes ~1 s to load, runs without checkpoints skip it

        _quiet_absl()
        self._ocp = ocp
        self.group = group
        self.directory = Path(directory).absolute()
        if self.directory.exists() and not self.directory.is_dir():
            raise RunError(f"checkpoint dir {directory} is not a directory")
        self.manager = ocp.CheckpointManager(self.directory, options=ocp.CheckpointManagerOptions(
            max_to_keep=keep, create=True, cleanup_tmp_directories=True))
        steps = sorted(self.manager.all_steps())
        if steps and not resume:
            raise RunError(f"checkpoint dir {directory} already holds steps {steps}: pass --resume "
                           "to continue it, or choose another dir")
        self.resume = resume
        devices = jax.devices()
        self._devices = devices
        self._sharding = jax.sharding.NamedSharding(jax.sharding.Mesh(np.array(devices), ("d",)),
                                                    jax.sharding.PartitionSpec("d"))

    def meta(self, step: int) -> dict:
        return self.manager.restore(step, args=self._ocp.args.Composite(meta=self._ocp.args.JsonRestore()))["meta"]

    _meta = meta

    def check_format(self, meta: dict) -> None:
        if meta.get("format") != "obscura-packed/1":
            raise RunError(f"cannot resume {self.directory}: it was written by a single-process run")

    def resumable_step(self, identity: dict) -> int | None:
        return newest_readable(self, identity)

    def steps_before(self, step: int) -> list[int]:
        return sorted((s for s in self.manager.all_steps() if s < step), reverse=True)

    def _local_trees(self, state: list) -> dict[int, dict[int, tuple]]:
        """Device position -> {stage: (params, opt_state)} for this process's stages."""
        position = {d.id: i for i, d in enumerate(self._devices)}
        out: dict[int, dict[int, tuple]] = {}
        for s, tree in enumerate(state):
            if tree is not None:
                out.setdefault(position[_device_of(tree).id], {})[s] = tree
        return out

    def save(self, step: int, state: list, identity: dict) -> None:
        ocp = self._ocp
        local = self._local_trees(state)
        mine = {str(d): row_layout(trees) for d, trees in local.items()}
        layout: dict[str, list] = {}
        for part in self.group.gather("checkpoint-layout", mine):
            layout.update(part)
        row_bytes = max([1] + [sum(e[-1] for e in rows) for rows in layout.values()])
        shards = []
        for d in sorted(local):
            leaves = [leaf for s in sorted(local[d]) for tree in local[d][s] for leaf in jax.tree.leaves(tree)]
            used = sum(e[-1] for e in layout[str(d)])
            shards.append(_packer(row_bytes, used)(leaves))
        packed = jax.make_array_from_single_device_arrays((len(self._devices), row_bytes), self._sharding, shards)
        meta = {"format": "obscura-packed/1", "step": int(step), "row_bytes": row_bytes,
                "identity": {k: _jsonable(v) for k, v in identity.items()}, "layout": layout}
        self.manager.save(step, args=ocp.args.Composite(state=ocp.args.StandardSave({"packed": packed}),
                                                        meta=ocp.args.JsonSave(meta)))
        self.manager.wait_until_finished()

    def restore(self, like_state: list, step: int) -> list:
        """The state saved at `step`: (params, opt_state) for this process's stages,
        placed like `like_state`'s; None for the others'."""
        ocp = self._ocp
        meta = self._meta(step)
        abstract = {"packed": jax.ShapeDtypeStruct((len(self._devices), meta["row_bytes"]), np.uint8,
                                                   sharding=self._sharding)}
        packed = orbax_restore(self.manager, step, ocp.args.Composite(
            state=ocp.args.StandardRestore(abstract)))["state"]["packed"]
        rows = {shard.index[0].start: shard.data for shard in packed.addressable_shards}
        out: list = [None] * len(like_state)
        for d, trees in self._local_trees(like_state).items():
            layout = meta["layout"].get(str(d))
            if layout is None or layout != row_layout(trees):
                raise RunError(f"cannot resume {self.directory}: device {d}'s stages differ from the checkpoint's")
            leaves = iter(_unpack(rows[d], layout))
            for s in sorted(trees):
                out[s] = tuple(jax.tree.unflatten(jax.tree.structure(part), [next(leaves) for _ in
                                                                            jax.tree.leaves(part)])
                               for part in trees[s])
        return out

    def latest_step(self) -> int | None:
        return self.manager.latest_step()

    def close(self) -> None:
        self.manager.close()
        if getattr(self, "lock", None) is not None:
            self.lock.release()
            self.lock = None
