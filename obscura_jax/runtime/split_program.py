"""A stage program's split backward, compiled: I and W as two XLA programs.

    I (params, residuals, dy[, grad_acc]) -> (dx, held[, grad_acc])   (grad_acc: at-once units)
    W (params, held, dy, grad_acc)        -> grad_acc + dparams        (grad_acc donated)

The cut (obscura_jax.runtime.backward_split) is made on ONE jaxpr of the stage's
forward and backward, `(params, x[, targets], dy) -> (dparams, dx, residual
leaves)`: the backward part reads the residual leaves exactly as the compiled
forward returns them (the same pullback, the same layout: checked), and the forward
part is what a W that re-derives its inputs re-runs. After I the micro-batch's
residuals become `held`: the residual leaves W reads (not copied) and what I
computed for it; `weight_grad_leaf_bytes` per leaf, `weight_grad_held_bytes` in all,
`weight_grad_made_bytes` the part I computes, `weight_grad_beside_bytes` the part
of that XLA could not write into the residual leaves I takes donated (what I's
outputs add to the residuals while it runs).
At-once units (obscura_jax.runtime.weight_grad) have their gradients accumulated by
I itself, into the gradient accumulator it then takes and donates.
"""
from __future__ import annotations

import functools
import warnings
import weakref

import jax
import jax.numpy as jnp

from obscura_jax.runtime.residuals import host_slots, memory_kind
from obscura_jax.runtime.backward_split import BackwardSplit, split_backward
from obscura_jax.runtime.flat_jaxpr import mark_checkpoint_inputs
from obscura_jax.runtime.stage_shards import _DATA, _WHOLE, _spec


class SplitBackward:
    """Mixed into StageProgram: needs its specs, layout, `_pullback`, `_cotangents`,
    the DataShards helpers, `weight_grad_mode` and `at_once_units`."""

    def compile_split(self) -> None:
        """Cut the backward into I and W and compile both (once; ahead of any step).
        Long: the two bodies share the cut and its slot maps, so they are built together."""
        if self._bwd_weight is not None:
            return
        params_spec, res_specs, dy_spec = self._split_specs
        cut = self._cut()
        n, r = cut.num_dparams, len(res_specs)
        num_args = len(cut.jaxpr.invars)
        inputs = [k for k in cut.w_args if n <= k < num_args - 1]
        if inputs:
            raise ValueError(f"{self.name}: W reads the stage's input or targets, which the forward does not keep")
        self._cut_backward = cut
        self._w_res = cut.w_residuals
        self.weight_grad_reads_dy = (num_args - 1) in cut.w_args
        self._i_accumulates = bool(cut.at_once)
        none = [None] * (num_args - n - 1)

        def grad_leaves(grad_acc):
            return jax.tree.leaves(self._unstack_grads(grad_acc))

        def with_grads(grad_acc, which, values):
            leaves = grad_leaves(grad_acc)
            for k, g in zip(which, values):
                leaves[k] = leaves[k] + g
            return self._stack(jax.tree.unflatten(jax.tree.structure(grad_acc), leaves))

        # The residual leaves only I reads (not the stage's own input or targets, which
        # are the caller's buffers) are donated: XLA may write W's cotangents into them,
        # so I's outputs need not sit beside every residual it read (docs/design.md,
        # "Memory on a device").
        self._i_donated = tuple(i for i in range(self._num_head, r) if i not in cut.w_residuals)
        self._i_passed = tuple(i for i in range(r) if i not in self._i_donated)

        def input_grad(params, donated, passed, dy, grad_acc=None):
            res_leaves = [None] * r
            for i, leaf in zip(self._i_donated + self._i_passed, tuple(donated) + tuple(passed)):
                res_leaves[i] = leaf
            args = jax.tree.leaves(params) + none + [self._local_dy(dy)]
            dx, held, once = cut.input_grad(args, self._unstack(res_leaves))
            # tokens get no input gradient: a scalar marks completion
            out = (dx[0] if dx else jnp.zeros((), jnp.float32)), self._stack(tuple(held))
            return out + (with_grads(grad_acc, cut.at_once, once),) if cut.at_once else out

        def weight_grad(params, held_leaves, dy, grad_acc):
            kept = len(self._w_res)
            res = [None] * r
            for i, leaf in zip(self._w_res, self._unstack(held_leaves[:kept], self._w_res)):
                res[i] = leaf
            held = [h[0] for h in held_leaves[kept:]] if self._stacks else held_leaves[kept:]
            dparams = cut.weight_grad(jax.tree.leaves(params) + none + [self._local_dy(dy)], res, held)
            return with_grads(grad_acc, cut.w_dparams, dparams), jnp.zeros((), jnp.float32)

        acc_in, acc_spec = ((_DATA,), (self._grads_spec(),)) if cut.at_once else ((), ())
        dx_out = _WHOLE if self.takes_tokens else _DATA
        i_body = self.mesh.local(input_grad, (_WHOLE, _DATA, _DATA, self._dy_in) + acc_in,
                                 (dx_out, _DATA) + ((_DATA,) if cut.at_once else ()))
        i_specs = (params_spec, tuple(res_specs[i] for i in self._i_donated),
                   tuple(res_specs[i] for i in self._i_passed), dy_spec, *acc_spec)
        self._input_grad_twin = functools.partial(_compile_input_grad, i_body, i_specs, bool(cut.at_once), False)
        i_lowered, self._bwd_input = _compile_input_grad(i_body, i_specs, bool(cut.at_once), True)
        # W reads I's held block where I left it (XLA chose its tensor sharding)
        held_out = [_spec(a, sh) for a, sh in zip(i_lowered.out_info[1], self._bwd_input.output_shardings[1])]
        held_specs = tuple(res_specs[i] for i in self._w_res) + tuple(held_out)
        self.weight_grad_leaf_bytes = tuple(self._bytes(h) for h in held_specs)
        self._w_offloaded = host_slots(memory_kind(h, self.device) for h in held_specs)
        self.weight_grad_host_bytes = sum(self.weight_grad_leaf_bytes[i] for i in self._w_offloaded)
        self.weight_grad_held_bytes = sum(self.weight_grad_leaf_bytes) - self.weight_grad_host_bytes
        self.weight_grad_made_bytes = sum(b for i, b in enumerate(self.weight_grad_leaf_bytes)
                                          if i >= len(self._w_res) and i not in self._w_offloaded)
        # of those, what I allocates beside the residuals: its outputs less what XLA
        # wrote into the donated residual leaves (and the accumulator), less dx
        i_mem = memory_of(self._bwd_input)
        dx_bytes = self._bytes(_spec(i_lowered.out_info[0], self._bwd_input.output_shardings[0]))
        self.weight_grad_beside_bytes = min(self.weight_grad_made_bytes,
                                            max(0, i_mem["output"] - i_mem["alias"] - dx_bytes))
        w_body = self.mesh.local(weight_grad, (_WHOLE, _DATA, self._dy_in, _DATA), (_DATA, _WHOLE))
        self._bwd_weight = jax.jit(w_body, donate_argnums=3).lower(
            params_spec, held_specs, dy_spec, self._grads_spec()).compile()
        self.temp_bytes = max(self.temp_bytes, compiled_temp_bytes(self._bwd_input), compiled_temp_bytes(self._bwd_weight))

    def _cut(self) -> BackwardSplit:
        """The cut of this stage's forward + backward under its weight-grad options."""
        fn, specs, n = self._forward_backward()
        tree_paths = jax.tree_util.tree_flatten_with_path(self._local_params)[0]
        at_once = tuple(k for k, (path, _) in enumerate(tree_paths)
                        if getattr(path[0], "key", None) in self.at_once_units)
        return split_backward(fn, specs, n, residuals=len(self._split_specs[1]),
                              rederive=self.weight_grad_mode == "rederive", at_once=at_once)

    def _forward_backward(self):
        """The stage as `(params..., x[, targets], dy) -> (dparams..., dx, residual
        leaves...)`, its input specs and the number of params. A re-deriving W needs
        the checkpoint regions' inputs marked (obscura_jax.runtime.flat_jaxpr)."""
        params_spec, res_specs, dy_spec = self._split_specs
        leaves, tree = jax.tree.flatten(self._local_params)
        n = len(leaves)
        apply = mark_checkpoint_inputs(self._apply) if self.weight_grad_mode == "rederive" else self._apply
        local_res = [self._local_spec(a, self._stacks and i >= self._num_head) for i, a in enumerate(res_specs)]

        def forward_backward(*flat):
            params = jax.tree.unflatten(tree, flat[:n])
            x, targets = flat[n], (flat[n + 1] if self.returns_loss else None)
            _, kept, layout = self._pullback(params, x, targets, apply)
            if layout.sources != self.layout.sources:
                raise AssertionError(f"{self.name}: the traced pullback differs from the compiled forward's")
            head = ((x,) if layout.keeps_input else ()) + ((targets,) if layout.keeps_targets else ())
            res = head + tuple(kept)
            if [(a.shape, a.dtype) for a in res] != [(s.shape, s.dtype) for s in local_res]:
                raise AssertionError(f"{self.name}: the traced residuals differ from the compiled forward's")
            cotangents = self._cotangents(layout, params, res, flat[-1])
            return jax.tree.leaves(cotangents[0]) + ([] if self.takes_tokens else [cotangents[1]]) + list(res)
        inputs = [self._local_spec(self._x_spec, False)]
        if self.returns_loss:
            inputs.append(self._local_spec(self._t_spec, False))
        return forward_backward, list(leaves) + inputs + [self._local_spec(dy_spec, False)], n

    # ---- running ---------------------------------------------------------------
    def input_grad(self, params, residuals, dy, grad_acc, keep_residuals: bool = False):
        """I of a split backward -> (grad_acc, dx or None, held, ready): `held`
        replaces the micro-batch's residuals until its W (what W reads, nothing
        else); `grad_acc` (donated) comes back with the at-once units' gradients.
        The residual leaves only I reads are donated (deleted) unless
        `keep_residuals` (a timing loop that runs I again on the same residuals: a
        twin program without the donation, compiled on first use)."""
        self._check_on_device(residuals, "I")
        self.compile_split()
        program = self._bwd_input
        if keep_residuals:
            if self._bwd_input_kept is None:
                self._bwd_input_kept = self._input_grad_twin()[1]
            program = self._bwd_input_kept
        leaves = residuals.leaves
        args = (params, tuple(leaves[i] for i in self._i_donated), tuple(leaves[i] for i in self._i_passed), dy)
        if self._i_accumulates:
            done, held, grad_acc = program(*args, grad_acc)
        else:
            done, held = program(*args)
        kept = tuple(residuals.leaves[i] for i in self._w_res)
        held = type(residuals)(kept + tuple(held), self.weight_grad_leaf_bytes, offloaded=self._w_offloaded)
        return grad_acc, (None if self.takes_tokens else done), held, done

    def weight_grad(self, params, held, dy, grad_acc):
        """W of a split backward -> (grad_acc + dparams, ready). `held` is what the I
        of this micro-batch returned; `grad_acc` is donated."""
        self._check_on_device(held, "W")
        self.compile_split()
        return self._bwd_weight(params, held.leaves, dy, grad_acc)

    def _check_on_device(self, residuals, what: str) -> None:
        if residuals.host_slots:
            raise ValueError(f"{self.name}: {what} issued while {len(residuals.host_slots)} residual "
                             "leaves are still on host (missing SI before it)")


def _compile_input_grad(body, specs, accumulates: bool, donate: bool):
    """(lowered, compiled) I: the gradient accumulator donated where I adds to it,
    and, with `donate`, the residual leaves only I reads (specs[1])."""
    donated = ((1,) if donate else ()) + ((4,) if accumulates else ())
    with warnings.catch_warnings():
        # a donated leaf no output can reuse is freed when I ends, as it would be anyway
        warnings.filterwarnings("ignore", message="Some donated buffers were not usable")
        lowered = jax.jit(body, donate_argnums=donated).lower(*specs)
        return lowered, lowered.compile()


def compiled_temp_bytes(compiled) -> int:
    """XLA's scratch memory for one run of a compiled program (0 if not reported)."""
    return memory_of(compiled)["temp"]


def memory_of(compiled) -> dict[str, int]:
    """XLA's memory analysis of a compiled program: temp, output and alias bytes
    (zeros where the backend reports none). Asked once per program: the memory check
    reads it at every estimate, and XLA recomputes it at every call."""
    found = _MEMORY_OF.get(compiled)
    if found is None:
        try:
            stats = compiled.memory_analysis()
        except Exception:  # not every backend implements memory analysis
            stats = None
        found = _MEMORY_OF[compiled] = {key: int(getattr(stats, f"{key}_size_in_bytes", 0) or 0)
                                        for key in ("temp", "output", "alias")}
    return dict(found)


_MEMORY_OF: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()   # goes with its program
