"""How a stage program's bodies see a stage mesh: per data shard. On one device
every helper here is the identity; on a D x T mesh (obscura_jax.runtime.stage_mesh) a value
one program hands another per shard (residuals, W's held block, the gradient
accumulator) carries a leading data axis, the stage's own input and targets arrive
split over data, and the loss cotangent of each shard is 1/D of the micro-batch's."""
from __future__ import annotations

import jax
from jax.sharding import PartitionSpec as P

from models.tensor_parallel import DATA_AXIS

_DATA, _WHOLE = P(DATA_AXIS), P()


def _spec(x, sharding) -> jax.ShapeDtypeStruct:
    return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding)


class DataShards:
    """Mixed into StageProgram: needs `mesh`, `returns_loss`, `_num_head` and
    `_params_spec`."""

    @property
    def _stacks(self) -> bool:
        return not self.mesh.single

    @property
    def _dy_in(self) -> P:
        return _WHOLE if self.returns_loss else _DATA

    def _bytes(self, spec) -> int:
        return self.mesh.shard_bytes(spec.shape, spec.dtype, spec.sharding)

    def _local_spec(self, spec, stacked: bool) -> jax.ShapeDtypeStruct:
        """One data shard's view of an array the mesh holds (stacked or batch-split)."""
        shape = tuple(spec.shape)
        if self._stacks and shape:
            shape = shape[1:] if stacked else (shape[0] // self.mesh.data,) + shape[1:]
        return jax.ShapeDtypeStruct(shape, spec.dtype)

    def _stack(self, tree):
        return jax.tree.map(lambda a: a[None], tree) if self._stacks else tree

    def _unstack(self, res_leaves, slots=None):
        """Residual leaves as the body sees them: the stage's own input and targets
        arrive batch-split, everything a program stacked loses its data axis."""
        if not self._stacks:
            return tuple(res_leaves)
        slots = range(len(res_leaves)) if slots is None else slots
        return tuple(a if i < self._num_head else a[0] for i, a in zip(slots, res_leaves))

    def _unstack_grads(self, grads):
        return jax.tree.map(lambda a: a[0], grads) if self._stacks else grads

    def _local_dy(self, dy):
        # the loss is the mean of the D shards' means: each shard's cotangent is dy / D
        return dy / self.mesh.data if self._stacks and self.returns_loss else dy

    def _grads_spec(self):
        """The gradient accumulator: the params' shardings, stacked over data on a mesh."""
        if not self._stacks:
            return self._params_spec
        d = self.mesh.data
        return jax.tree.map(lambda a: _spec(jax.ShapeDtypeStruct((d,) + tuple(a.shape), a.dtype),
                                            self.mesh.stacked(a.sharding)), self._params_spec)
