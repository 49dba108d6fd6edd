"""The split backward at its real cost: one stage's backward jaxpr cut into I (what
the upstream stage waits for) and W (the weight gradients nobody waits for).

    backward(params, residuals, dy) -> (dparams, dx)        one jaxpr, flattened
                       |
       I = every equation dx depends on                     (the cotangent chain,
           -> dx, held                                       recompute included)
       W = every equation only dparams depends on           (x^T dy per matmul,
           (held, kept inputs) -> dparams                    norm-scale sums, ...)

`held` is what W reads that I computed: for each weight-bearing op its output
cotangent and, where the forward did not keep it, its input (a value recomputed
under the stage's policy). Recompute therefore runs once, in I. `kept inputs` are
the residual leaves (and dy) W reads directly: typically a matmul's saved input.
Everything else in the residuals is needed by I alone and is freed when I ends.

This is the graph cut torch.distributed.pipelining makes on autograd graphs
(stage_backward_input / stage_backward_weight), made here on the jaxpr: the
pullback is traced once with the stage's params, residual leaves and dy as inputs,
call-like equations (checkpoint/remat, pjit, custom_jvp) are inlined so the cut
can pass through them (each stage program is its own XLA program, so a remat
boundary protects nothing here), and each half is evaluated equation by equation
under `jit`. Control flow (scan, cond, while) stays whole: an equation that feeds
both dx and dparams lands in I, and W then holds its weight-gradient outputs.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import jax
from jax.extend.core import Literal

# Call-like primitives and the parameter that holds their body: inlined so the cut
# can separate their input- and weight-gradient parts.
_BODIES = {"remat2": "jaxpr", "checkpoint": "jaxpr", "pjit": "jaxpr", "jit": "jaxpr",
           "closed_call": "call_jaxpr", "core_call": "call_jaxpr", "custom_jvp_call": "call_jaxpr"}

# Where a value W reads comes from.
_ARG, _HELD = 0, 1


def _body(eqn):
    """(jaxpr, consts) of a call-like equation, or None."""
    key = _BODIES.get(eqn.primitive.name)
    if key is None or key not in eqn.params:
        return None
    body = eqn.params[key]
    if hasattr(body, "jaxpr") and hasattr(body, "consts"):   # a ClosedJaxpr
        return body.jaxpr, body.consts
    return body, ()


def _bind(eqn, invals):
    params = eqn.primitive.get_bind_params(eqn.params)
    subfuns = ()
    if isinstance(params, tuple):        # older JAX: (subfuns, params)
        subfuns, params = params
    out = eqn.primitive.bind(*subfuns, *invals, **params)
    return out if eqn.primitive.multiple_results else [out]


def _read(env: dict, v):
    return v.val if isinstance(v, Literal) else env[v]


def inline_eval(jaxpr, consts, args) -> list:
    """Evaluate `jaxpr`, inlining call-like equations (traced: yields a flat jaxpr)."""
    env: dict = dict(zip(jaxpr.constvars, consts))
    env.update(zip(jaxpr.invars, args))
    for eqn in jaxpr.eqns:
        invals = [_read(env, v) for v in eqn.invars]
        body = _body(eqn)
        outs = inline_eval(body[0], body[1], invals) if body is not None else _bind(eqn, invals)
        env.update(zip(eqn.outvars, outs))
    return [_read(env, v) for v in jaxpr.outvars]


def _slice(eqns, roots) -> set[int]:
    """Indices of the equations the variables `roots` depend on."""
    needed = {v for v in roots if not isinstance(v, Literal)}
    chosen = set()
    for i in range(len(eqns) - 1, -1, -1):
        if any(v in needed for v in eqns[i].outvars):
            chosen.add(i)
            needed.update(v for v in eqns[i].invars if not isinstance(v, Literal))
    return chosen


@dataclass(frozen=True)
class BackwardSplit:
    """The cut of one flat backward jaxpr. Inputs are the flat (params, residual
    leaves, dy) in order; outputs the flat dparams then dx (dx absent when the stage
    takes tokens). `held_avals`: what I hands W, `kept_args`: the inputs W reads."""
    jaxpr: Any
    consts: tuple
    num_dparams: int
    i_eqns: tuple[int, ...]
    w_eqns: tuple[int, ...]
    held_vars: tuple            # variables I computes and W reads
    kept_args: tuple[int, ...]  # input positions W reads

    @property
    def held_avals(self) -> tuple:
        return tuple(v.aval for v in self.held_vars)

    def input_grad(self, *args) -> tuple[list, list]:
        """I: (dx outputs, held values) from the flat inputs."""
        env = self._run(self.i_eqns, dict(zip(self.jaxpr.invars, args)))
        dx = [_read(env, v) for v in self.jaxpr.outvars[self.num_dparams:]]
        return dx, [env[v] for v in self.held_vars]

    def weight_grad(self, kept, held) -> list:
        """W: the flat dparams from the kept inputs and I's held values."""
        env = dict(zip((self.jaxpr.invars[i] for i in self.kept_args), kept))
        env.update(zip(self.held_vars, held))
        env = self._run(self.w_eqns, env)
        return [_read(env, v) for v in self.jaxpr.outvars[:self.num_dparams]]

    def _run(self, which, env: dict) -> dict:
        env.update(zip(self.jaxpr.constvars, self.consts))
        eqns = self.jaxpr.eqns
        for i in which:
            env.update(zip(eqns[i].outvars, _bind(eqns[i], [_read(env, v) for v in eqns[i].invars])))
        return env


def _depends_on(eqns, roots) -> set[int]:
    """Indices of the equations that read, directly or not, one of `roots`."""
    tainted, chosen = set(roots), set()
    for i, eqn in enumerate(eqns):
        if any(not isinstance(v, Literal) and v in tainted for v in eqn.invars):
            chosen.add(i)
            tainted.update(eqn.outvars)
    return chosen


def split_backward(backward: Callable, arg_specs: list, num_dparams: int,
                   cotangent_args: tuple[int, ...] = (-1,)) -> BackwardSplit:
    """Trace `backward(*flat args) -> flat (dparams..., dx...)` and cut it.
    `cotangent_args`: the positions of the incoming cotangents (dy). W keeps only
    equations that read a cotangent; a forward value recomputed for W alone (the
    attention output an output projection's weight gradient needs) is computed in
    I and held, as the policy's recompute is: W never holds the attention
    probabilities it would need to rebuild it. With no dx (a stage that takes
    tokens) nothing waits for I, and W does the whole backward."""
    traced = jax.make_jaxpr(backward)(*arg_specs)
    flat = jax.make_jaxpr(lambda *a: inline_eval(traced.jaxpr, traced.consts, a))(*arg_specs)
    jaxpr, eqns = flat.jaxpr, flat.jaxpr.eqns
    w_slice = _slice(eqns, jaxpr.outvars[:num_dparams])
    if len(jaxpr.outvars) == num_dparams:
        in_i, in_w = set(), sorted(w_slice)
    else:
        in_i = _slice(eqns, jaxpr.outvars[num_dparams:])
        on_cotangents = _depends_on(eqns, [jaxpr.invars[k] for k in cotangent_args])
        in_i |= w_slice - on_cotangents
        in_w = sorted(w_slice - in_i)
    defined_by_i = {v for i in in_i for v in eqns[i].outvars}
    w_reads = [v for i in in_w for v in eqns[i].invars] + list(jaxpr.outvars[:num_dparams])
    held, seen = [], set()
    for v in w_reads:
        if not isinstance(v, Literal) and v in defined_by_i and v not in seen:
            seen.add(v)
            held.append(v)
    w_read_set = {v for v in w_reads if not isinstance(v, Literal)}
    kept = tuple(k for k, v in enumerate(jaxpr.invars) if v in w_read_set)
    return BackwardSplit(jaxpr, tuple(flat.consts), num_dparams, tuple(sorted(in_i)), tuple(in_w),
                         tuple(held), kept)
