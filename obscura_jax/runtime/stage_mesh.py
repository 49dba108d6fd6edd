"""The devices of one pipeline stage: one device, or a data x tensor mesh.

A stage on D x T devices runs its programs as one SPMD program over the mesh

    devices[d * T + t]  ->  mesh[d, t]        axes ("data", "tensor")

  tensor  parameters shard by the family's Megatron layout (models.tensor_parallel);
          XLA's sharding propagation places the collectives (an all-reduce after
          each row layer, the head's loss over the sharded vocabulary);
  data    every micro-batch splits over D along its batch dimension. The programs'
          bodies are written per data shard: `local` wraps them in a shard_map that
          is manual over "data" only (tensor stays automatic), so nothing in a
          forward, backward, I or W crosses the data axis. What a body hands to
          another program per shard (residuals, W's held block, the gradient
          accumulator) is stacked on a leading axis of size D ("data"-sharded);
          the accumulator is summed over that axis once per step, in the stage's
          optimizer update (the data-parallel all-reduce: after the stage's last
          backward or W, so it overlaps the other stages' cool-down).

One device (D = T = 1) keeps the single-device programs exactly: `local` returns
the body unchanged and nothing is stacked.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P, SingleDeviceSharding

from models.tensor_parallel import DATA_AXIS, TENSOR_AXIS, tensor_specs


@dataclass(frozen=True)
class StageMesh:
    devices: tuple            # D * T jax devices, data-major
    data: int = 1
    tensor: int = 1

    def __post_init__(self):
        if len(self.devices) != self.data * self.tensor:
            raise ValueError(f"a {self.data} x {self.tensor} stage mesh needs {self.data * self.tensor} "
                             f"devices, got {len(self.devices)}")

    @property
    def single(self) -> bool:
        return self.data * self.tensor == 1

    @property
    def lead(self):
        """The device that names the stage in reports and keys its worker."""
        return self.devices[0]

    @property
    def size(self) -> int:
        return len(self.devices)

    @functools.cached_property
    def mesh(self) -> Mesh:
        return Mesh(np.array(self.devices, dtype=object).reshape(self.data, self.tensor),
                    (DATA_AXIS, TENSOR_AXIS))

    def sharding(self, spec: P = P(), memory_kind: str | None = None):
        """A sharding on this stage's devices (SingleDeviceSharding on one device)."""
        if self.single:
            return SingleDeviceSharding(self.lead, memory_kind=memory_kind)
        return NamedSharding(self.mesh, spec, memory_kind=memory_kind)

    @property
    def replicated(self):
        return self.sharding(P())

    @property
    def batch(self):
        """Micro-batch arrays (tokens, targets, activations): split over data."""
        return self.sharding(P(DATA_AXIS))

    def param_shardings(self, cfg, params_like):
        """The stage's parameters: tensor-sharded by the family's layout, replicated
        over data."""
        if self.single:
            return jax.tree.map(lambda _: self.replicated, params_like)
        return jax.tree.map(lambda spec: NamedSharding(self.mesh, spec),
                            tensor_specs(cfg, params_like, self.tensor),
                            is_leaf=lambda x: isinstance(x, P))

    def stacked(self, sharding):
        """The sharding of a per-data-shard value stacked on a leading data axis, from
        the sharding of one shard's value (its tensor sharding kept)."""
        if self.single:
            return sharding
        spec = sharding.spec if isinstance(sharding, NamedSharding) else P()
        return NamedSharding(self.mesh, P(DATA_AXIS, *spec), memory_kind=sharding.memory_kind)

    def local(self, body, in_specs, out_specs):
        """`body` written for one data shard, as a program over the mesh (manual over
        data, automatic over tensor). Specs name only the data axis: P("data") for a
        batch-split or stacked value, P() for one every shard holds whole."""
        if self.single:
            return body
        # check_vma off: parameters enter replicated over data and their cotangents
        # must stay per shard (with it on, JAX would all-reduce them in every backward)
        return jax.shard_map(body, mesh=self.mesh, in_specs=in_specs, out_specs=out_specs,
                             axis_names=frozenset({DATA_AXIS}), check_vma=False)

    def shard_bytes(self, shape, dtype, sharding) -> int:
        """Bytes one device of the stage holds of an array."""
        shard = sharding.shard_shape(tuple(shape)) if shape else ()
        return int(math.prod(shard)) * np.dtype(dtype).itemsize

    def describe(self) -> str:
        ids = ",".join(str(d.id) for d in self.devices)
        if self.single:
            return str(self.lead)
        return f"{self.lead.platform}:[{ids}] ({self.data} data x {self.tensor} tensor)"


def _key(index) -> tuple:
    return tuple((i.start, i.stop, i.step) for i in index)


def move(value, sharding):
    """`value` onto `sharding` (another stage's mesh). A value that spans processes
    (a stage mesh with its data axis across processes) moves shard by shard inside
    each process: stage s's data shard d and stage s+1's lie in the same process, and
    JAX's device_put reshards across hosts only between equal device sets."""
    if value.is_fully_addressable or sharding.is_fully_addressable:
        return jax.device_put(value, sharding)
    mine = {_key(sh.index): sh.data for sh in value.addressable_shards}
    wanted = sharding.addressable_devices_indices_map(value.shape)
    missing = [d for d, idx in wanted.items() if _key(idx) not in mine]
    if missing:
        raise ValueError(f"stage mesh transfer: device {missing[0]} needs a shard that lies in another "
                         "process (the stages' data axes must split over processes alike)")
    return jax.make_array_from_single_device_arrays(
        value.shape, sharding, [jax.device_put(mine[_key(idx)], d) for d, idx in wanted.items()])


def local_value(x) -> np.ndarray:
    """The whole of `x` as a numpy array, from this process's shards when they cover it
    (a stage mesh's parameters: whole over data, their tensor shards in one process)."""
    if x.is_fully_addressable:
        return np.asarray(jax.device_get(x))
    out = np.empty(x.shape, x.dtype)
    covered = np.zeros(x.shape, bool)
    for sh in x.addressable_shards:
        out[sh.index] = np.asarray(sh.data)
        covered[sh.index] = True
    if not covered.all():
        raise ValueError("this process holds only part of the array")
    return out


def device_bytes(tree) -> int:
    """Bytes of `tree`'s arrays on one device (the first of each array's sharding)."""
    return sum(int(math.prod(x.sharding.shard_shape(x.shape))) * x.dtype.itemsize
               for x in jax.tree.leaves(tree))


def single(device) -> StageMesh:
    return StageMesh((device,), 1, 1)
