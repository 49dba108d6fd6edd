"""One pipeline stage as compiled programs: forward (output + residuals) and
backward (accumulated param grads + input grad), or the backward split in two.

    fwd(params, x[, targets])            -> (y or loss, residuals)
    bwd(params, residuals, dy, grad_acc) -> (grad_acc + dparams, dx)   (grad_acc donated)
    I   (params, residuals, dy, grad_acc) -> (grad_acc, dx, held)  (split backward, input half)
    W   (params, held, dy, grad_acc)      -> grad_acc + dparams    (weight half, grad_acc donated)

I and W are the two halves of the backward cut by obscura_jax.runtime.backward_split
(compiled by obscura_jax.runtime.split_program): I runs the cotangent chain (and the
policy's recompute, once) and the small gradients' reductions, and hands W, per
weight matmul, its output cotangent and any input the forward did not keep; W runs
only the weight matmuls (I + W ~ B). After I the micro-batch's residuals shrink to
what W reads (`input_grad` returns that block, `weight_grad_held_bytes` per
micro-batch), which may be more than the residuals on a recomputing stage:
recomputed matmul inputs and output cotangents wait for W. I takes the gradient
accumulator too: the gradients it finishes (the norm scales' and biases' sums, a
head whose W runs at once: obscura_jax.runtime.weight_grad) it adds there itself.

Both are `jax.vjp` split across two jitted programs. The pullback that `jax.vjp`
returns is a pytree whose leaves are everything the backward needs. Some of those
leaves ARE the forward's inputs (the parameter tracers, the stage input, the
targets: Python identity holds at trace time), so returning them would copy every
weight into the activation memory of each micro-batch. We return only the other
leaves and a static layout that says where each pullback leaf comes from; the
backward re-inserts the parameters (and the caller's own input buffers) before
rebuilding the pullback. The residuals of one micro-batch are thus exactly the
activation memory that the stage's recompute policy keeps.

Programs are compiled ahead of time (`jit(...).lower(specs).compile()`) for one
stage mesh (obscura_jax.runtime.stage_mesh: one device, or data x tensor) and one
micro-batch shape: the layout recorded while tracing the forward is the one the
compiled forward produces, with no retrace that could change it. On a mesh each
body runs per data shard (`StageMesh.local`): residuals, W's held block and the
gradient accumulator are stacked on a leading data axis, and every byte count here
is what ONE device of the stage holds.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from models.tensor_parallel import DATA_AXIS
from obscura_jax.runtime.residuals import Residuals, device_sizes, host_slots, memory_kind
from obscura_jax.runtime.split_program import SplitBackward, compiled_temp_bytes, memory_of
from obscura_jax.runtime.stage_mesh import StageMesh, single
from obscura_jax.runtime.stage_shards import _DATA, _WHOLE, DataShards, _spec

# Where one pullback leaf comes from.
_PARAM, _INPUT, _TARGETS, _KEPT = 0, 1, 2, 3


@dataclass(frozen=True)
class PullbackLayout:
    """Static recipe to rebuild the pullback: (source, index) per leaf.
    Input and targets are passed back as the first residual slots when kept."""
    treedef: Any
    sources: tuple[tuple[int, int], ...]
    keeps_input: bool
    keeps_targets: bool


def _plain(x) -> jax.ShapeDtypeStruct:
    return jax.ShapeDtypeStruct(x.shape, x.dtype)


class StageProgram(SplitBackward, DataShards):
    """Compiled forward/backward of one stage on its device or stage mesh.

    `apply(params, x)` (or `apply(params, x, targets)` when `returns_loss`) is the
    stage's pure function. When `takes_tokens` the input is integer tokens and gets
    no cotangent (dx is None). When `returns_loss` the output is the scalar loss of
    the micro-batch and its dy is the loss weight (1/m for a mean over m).
    `split`: the stage runs I and W only, so B compiles on first use (`compile_fused`).
    `mesh` (a StageMesh; default: `device` alone) and `param_shardings` (a tree of
    shardings on it, StageMesh.param_shardings) place the stage on D x T devices.
    `weight_grad_mode` ("hold" or "rederive") and `at_once_units` (top-level param
    keys whose gradients I computes) shape the split backward
    (obscura_jax.runtime.weight_grad).
    """

    def __init__(self, apply: Callable, *, takes_tokens: bool, returns_loss: bool,
                 device: jax.Device | None = None, params_like, x_like, targets_like=None,
                 name: str = "stage", split: bool = False, mesh: StageMesh | None = None,
                 param_shardings=None, weight_grad_mode: str = "hold", at_once_units=frozenset()):
        if returns_loss and targets_like is None:
            raise ValueError(f"{name}: a stage that returns the loss needs targets")
        if weight_grad_mode not in ("hold", "rederive"):
            raise ValueError(f"{name}: weight_grad_mode must be hold or rederive, got {weight_grad_mode!r}")
        self.weight_grad_mode = weight_grad_mode
        self.at_once_units = frozenset(at_once_units)
        self.name = name
        self.mesh = mesh if mesh is not None else single(device)
        self.device = self.mesh.lead
        self.takes_tokens = takes_tokens
        self.returns_loss = returns_loss
        self._apply = apply
        self.sharding = self.mesh.replicated
        self.batch_sharding = self.mesh.batch
        if param_shardings is None:
            param_shardings = jax.tree.map(lambda _: self.sharding, params_like)
        self.param_shardings = param_shardings
        params_spec = jax.tree.map(_spec, params_like, param_shardings)
        x_spec = _spec(x_like, self.batch_sharding)
        t_spec = None if targets_like is None else _spec(targets_like, self.batch_sharding)
        self.params_bytes = sum(self._bytes(a) for a in jax.tree.leaves(params_spec))
        self._local_params = jax.tree.map(_plain, params_like)

        self._layout: PullbackLayout | None = None
        args = (params_spec, x_spec) + ((t_spec,) if returns_loss else ())
        body = self.mesh.local(self._forward_local, (_WHOLE, _DATA) + ((_DATA,) if returns_loss else ()),
                               (_WHOLE if returns_loss else _DATA, _DATA))
        lowered = jax.jit(body).lower(*args)
        self.layout = self._layout
        self._fwd = lowered.compile()
        out_info, out_shardings = lowered.out_info, self._fwd.output_shardings
        self.output_spec = _spec(out_info[0], out_shardings[0])
        self.output_bytes = self._bytes(self.output_spec)
        kept_specs = [_spec(a, sh) for a, sh in zip(out_info[1], out_shardings[1])]
        head = (([x_spec] if self.layout.keeps_input else [])
                + ([t_spec] if self.layout.keeps_targets else []))
        self._num_head = len(head)
        res_specs = head + kept_specs
        self.residual_leaf_bytes = tuple(self._bytes(s) for s in res_specs)
        # by memory kind: a policy's offloaded residuals come out in host memory
        self.residual_leaf_kinds = tuple(memory_kind(s, self.device) for s in res_specs)
        self._offloaded = host_slots(self.residual_leaf_kinds)
        self.residual_host_bytes = sum(self.residual_leaf_bytes[i] for i in self._offloaded)
        self.residual_bytes = sum(self.residual_leaf_bytes) - self.residual_host_bytes   # in device memory
        dy_spec = _spec(out_info[0], self.sharding if returns_loss else self.batch_sharding)
        self.temp_bytes = compiled_temp_bytes(self._fwd)     # grows as the backward programs compile
        self._params_spec = params_spec
        self._x_spec, self._t_spec = x_spec, t_spec
        self._split_specs = (params_spec, tuple(res_specs), dy_spec)
        self._bwd = self._bwd_input = self._bwd_weight = self._bwd_input_kept = None
        self.weight_grad_held_bytes = self.weight_grad_made_bytes = self.weight_grad_beside_bytes = None
        self.weight_grad_host_bytes = 0      # W's block and its parts: once the split backward compiles
        if not split:
            self.compile_fused()
        # dy that a W keeps from its I (the loss stage's dy is the shared scalar)
        self.dy_bytes = 0 if returns_loss else self.output_bytes

    @property
    def residual_memory_kinds(self) -> dict[str, int]:
        """Residual bytes per micro-batch by memory kind, as JAX reports the kinds
        (e.g. {"device": ..., "pinned_host": ...})."""
        out: dict[str, int] = {}
        for kind, n in zip(self.residual_leaf_kinds, self.residual_leaf_bytes):
            out[kind] = out.get(kind, 0) + n
        return out

    @property
    def residual_device_leaf_bytes(self) -> tuple[int, ...]:
        """Bytes per residual leaf in device memory (0 for an offloaded one): what a
        swap (SO) chooses from."""
        return device_sizes(self.residual_leaf_bytes, self._offloaded)

    def compile_fused(self) -> None:
        """Compile the fused backward B (once; a split-only stage never needs it)."""
        if self._bwd is not None:
            return
        params_spec, res_specs, dy_spec = self._split_specs
        body = self.mesh.local(functools.partial(self._backward_local, self.layout),
                               (_WHOLE, _DATA, self._dy_in, _DATA),
                               (_DATA, _WHOLE if self.takes_tokens else _DATA))
        bwd = jax.jit(body, donate_argnums=3)
        self._bwd = bwd.lower(params_spec, res_specs, dy_spec, self._grads_spec()).compile()
        self.temp_bytes = max(self.temp_bytes, compiled_temp_bytes(self._bwd))

    def _forward_local(self, params, x, targets=None):
        out, kept = self._forward_traced(params, x, targets)
        if self._stacks and self.returns_loss:
            out = jax.lax.pmean(out, DATA_AXIS)
        return out, self._stack(kept)

    def _backward_local(self, layout, params, res_leaves, dy, grad_acc):
        grads, done = self._backward_traced(layout, params, self._unstack(res_leaves), self._local_dy(dy),
                                            self._unstack_grads(grad_acc))
        return self._stack(grads), done

    # ---- traced bodies -------------------------------------------------------
    def _forward_traced(self, params, x, targets=None):
        out, kept, self._layout = self._pullback(params, x, targets, self._apply)
        return out, kept

    def _pullback(self, params, x, targets, apply) -> tuple[Any, tuple, PullbackLayout]:
        """(output, kept leaves, layout) of `jax.vjp` of `apply` (the stage's function)."""
        if self.takes_tokens:
            fn = (lambda p: apply(p, x, targets)) if self.returns_loss else (lambda p: apply(p, x))
            out, pullback = jax.vjp(fn, params)
        else:
            fn = (lambda p, h: apply(p, h, targets)) if self.returns_loss else apply
            out, pullback = jax.vjp(fn, params, x)
        leaves, treedef = jax.tree.flatten(pullback)
        param_pos = {id(leaf): i for i, leaf in enumerate(jax.tree.leaves(params))}
        kept: list = []
        kept_pos: dict[int, int] = {}
        sources = []
        for leaf in leaves:
            if id(leaf) in param_pos:
                sources.append((_PARAM, param_pos[id(leaf)]))
            elif leaf is x:
                sources.append((_INPUT, 0))
            elif targets is not None and leaf is targets:
                sources.append((_TARGETS, 0))
            else:
                if not isinstance(leaf, jax.Array):
                    raise TypeError(f"{self.name}: pullback leaf {type(leaf).__name__} is not an array")
                if id(leaf) not in kept_pos:  # a leaf used twice is returned once
                    kept_pos[id(leaf)] = len(kept)
                    kept.append(leaf)
                sources.append((_KEPT, kept_pos[id(leaf)]))
        layout = PullbackLayout(treedef, tuple(sources), keeps_input=any(s == _INPUT for s, _ in sources),
                                keeps_targets=any(s == _TARGETS for s, _ in sources))
        return out, tuple(kept), layout

    def _cotangents(self, layout: PullbackLayout, params, res_leaves, dy):
        """The pullback rebuilt from params + residuals, applied to dy."""
        params_flat = jax.tree.leaves(params)
        offset = 0
        slot = {}
        if layout.keeps_input:
            slot[_INPUT] = res_leaves[offset]
            offset += 1
        if layout.keeps_targets:
            slot[_TARGETS] = res_leaves[offset]
            offset += 1
        leaves = []
        for src, i in layout.sources:
            if src == _PARAM:
                leaves.append(params_flat[i])
            elif src == _KEPT:
                leaves.append(res_leaves[offset + i])
            else:
                leaves.append(slot[src])
        return jax.tree.unflatten(layout.treedef, leaves)(dy)

    def _backward_traced(self, layout: PullbackLayout, params, res_leaves, dy, grad_acc):
        cotangents = self._cotangents(layout, params, res_leaves, dy)
        grads = jax.tree.map(jnp.add, grad_acc, cotangents[0])
        # Tokens get no cotangent; a scalar marks completion instead (the grads are
        # donated to the next backward, so they cannot be waited on).
        done = jnp.zeros((), jnp.float32) if self.takes_tokens else cotangents[1]
        return grads, done

    # ---- running ---------------------------------------------------------------
    def forward(self, params, x, targets=None):
        """-> (y or loss, Residuals). Inputs must already be on this stage's device."""
        if self.returns_loss:
            out, kept = self._fwd(params, x, targets)
        else:
            out, kept = self._fwd(params, x)
        head = ((x,) if self.layout.keeps_input else ()) + ((targets,) if self.layout.keeps_targets else ())
        return out, Residuals(head + tuple(kept), self.residual_leaf_bytes, offloaded=self._offloaded)

    def backward(self, params, residuals: Residuals, dy, grad_acc):
        """-> (grad_acc + dparams, dx, ready). `grad_acc` is donated. dx is None for
        the token stage; `ready` is an output that is ready when the backward is
        done (dx itself, or a scalar on the token stage)."""
        if residuals.host_slots:
            raise ValueError(f"{self.name}: backward issued while {len(residuals.host_slots)} residual "
                             "leaves are still on host (missing SI before B)")
        self.compile_fused()
        grads, done = self._bwd(params, residuals.leaves, dy, grad_acc)
        return grads, (None if self.takes_tokens else done), done

    def program_memory(self) -> dict[str, dict[str, int]]:
        """XLA's memory analysis of each compiled program, by action kind ("F", "B",
        "I", "W"): temp, output and alias bytes per device (what the memory check,
        obscura_jax.run.stage_bytes, counts beside the residuals)."""
        programs = {"F": self._fwd, "B": self._bwd, "I": self._bwd_input, "W": self._bwd_weight}
        return {kind: memory_of(c) for kind, c in programs.items() if c is not None}

    def zero_grads(self, params=None):
        """Fresh zero gradient accumulators on the device (host zeros: nothing to compile)."""
        spec = self._grads_spec()
        return jax.device_put(jax.tree.map(lambda a: np.zeros(a.shape, a.dtype), spec),
                              jax.tree.map(lambda a: a.sharding, spec))

    def loss_weight(self, num_microbatches: int):
        """dy of the loss stage so that the summed grads are those of the mean loss."""
        return jax.device_put(jnp.asarray(1.0 / num_microbatches, self.output_spec.dtype), self.sharding)
