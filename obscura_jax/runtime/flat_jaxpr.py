"""Flat jaxprs for the split backward (obscura_jax.runtime.backward_split): call-like
equations inlined, checkpoint regions' inputs marked, and the graph questions the
cut asks (what an output needs, what a value feeds, what a value costs to hold).

Inlining: each stage program is its own XLA program, so a remat boundary protects
nothing once the backward is cut; call-like equations (checkpoint/remat, pjit,
custom_jvp) are evaluated body by body under the tracing of `jax.make_jaxpr`, so
the cut can pass through them. Control flow (scan, cond, while) stays whole.

Marking: `mark_checkpoint_inputs(fn)` is `fn` with every value that enters one of
its top-level `jax.checkpoint` regions as a computed input (not an argument of
`fn`) passed through `checkpoint_name(..., CHECKPOINT_INPUT)`, an identity. The
mark survives differentiation as a `name` equation in the forward part of a traced
forward + backward, so a W that re-derives its inputs can find where each region
(a model's unit) starts without knowing the model.
"""
from __future__ import annotations

from collections import defaultdict

import jax
import numpy as np
from jax.ad_checkpoint import checkpoint_name
from jax.extend.core import Literal

# Call-like primitives and the parameter that holds their body: inlined so the cut
# can separate their input- and weight-gradient parts.
_BODIES = {"remat2": "jaxpr", "checkpoint": "jaxpr", "pjit": "jaxpr", "jit": "jaxpr",
           "closed_call": "call_jaxpr", "core_call": "call_jaxpr", "custom_jvp_call": "call_jaxpr"}
_CHECKPOINTS = ("remat2", "checkpoint")
CHECKPOINT_INPUT = "obscura.checkpoint_input"


def _body(eqn):
    """(jaxpr, consts) of a call-like equation, or None."""
    key = _BODIES.get(eqn.primitive.name)
    if key is None or key not in eqn.params:
        return None
    body = eqn.params[key]
    if hasattr(body, "jaxpr") and hasattr(body, "consts"):   # a ClosedJaxpr
        return body.jaxpr, body.consts
    return body, ()


def bind(eqn, invals):
    params = eqn.primitive.get_bind_params(eqn.params)
    subfuns = ()
    if isinstance(params, tuple):        # older JAX: (subfuns, params)
        subfuns, params = params
    out = eqn.primitive.bind(*subfuns, *invals, **params)
    return out if eqn.primitive.multiple_results else [out]


def read(env: dict, v):
    return v.val if isinstance(v, Literal) else env[v]


def inline_eval(jaxpr, consts, args) -> list:
    """Evaluate `jaxpr`, inlining call-like equations (traced: yields a flat jaxpr)."""
    env: dict = dict(zip(jaxpr.constvars, consts))
    env.update(zip(jaxpr.invars, args))
    for eqn in jaxpr.eqns:
        invals = [read(env, v) for v in eqn.invars]
        body = _body(eqn)
        outs = inline_eval(body[0], body[1], invals) if body is not None else bind(eqn, invals)
        env.update(zip(eqn.outvars, outs))
    return [read(env, v) for v in jaxpr.outvars]


def flat_jaxpr(fn, arg_specs):
    """The ClosedJaxpr of `fn(*arg_specs)` with every call-like equation inlined."""
    traced = jax.make_jaxpr(fn)(*arg_specs)
    return jax.make_jaxpr(lambda *a: inline_eval(traced.jaxpr, traced.consts, a))(*arg_specs)


def mark_checkpoint_inputs(fn):
    """`fn` with the computed inputs of its top-level checkpoint regions marked (the
    module docstring). Same outputs, same residuals under `jax.vjp`."""
    def marked(*args):
        flat, tree = jax.tree.flatten(args)
        out_tree = []

        def flat_fn(*a):
            leaves, structure = jax.tree.flatten(fn(*jax.tree.unflatten(tree, a)))
            out_tree.append(structure)
            return leaves
        closed = jax.make_jaxpr(flat_fn)(*flat)
        jaxpr = closed.jaxpr
        env: dict = dict(zip(jaxpr.constvars, closed.consts))
        env.update(zip(jaxpr.invars, flat))
        computed = {v for e in jaxpr.eqns for v in e.outvars}
        for eqn in jaxpr.eqns:
            invals = [read(env, v) for v in eqn.invars]
            if eqn.primitive.name in _CHECKPOINTS:
                invals = [checkpoint_name(x, CHECKPOINT_INPUT) if not isinstance(v, Literal) and v in computed
                          else x for v, x in zip(eqn.invars, invals)]
            env.update(zip(eqn.outvars, bind(eqn, invals)))
        return jax.tree.unflatten(out_tree[0], [read(env, v) for v in jaxpr.outvars])
    return marked


def marked_inputs(jaxpr) -> set:
    """The variables a `mark_checkpoint_inputs` mark defines in a flat jaxpr."""
    return {e.outvars[0] for e in jaxpr.eqns
            if e.primitive.name == "name" and e.params.get("name") == CHECKPOINT_INPUT}


def nbytes(v) -> int:
    """Bytes of a variable's value (0 for a literal)."""
    if isinstance(v, Literal):
        return 0
    aval = v.aval
    return int(np.prod(aval.shape, dtype=np.int64)) * np.dtype(aval.dtype).itemsize


class Graph:
    """Producer / consumer index of a flat jaxpr's equations."""

    def __init__(self, jaxpr):
        self.jaxpr = jaxpr
        self.eqns = jaxpr.eqns
        self.producer = {v: i for i, e in enumerate(self.eqns) for v in e.outvars}
        self.consumers: dict = defaultdict(set)
        for i, e in enumerate(self.eqns):
            for v in e.invars:
                if not isinstance(v, Literal):
                    self.consumers[v].add(i)

    def upstream(self, roots, stop=frozenset()) -> set[int]:
        """Equations the variables `roots` depend on, not looking past `stop` (values
        given as inputs: a stage's residuals)."""
        todo = [v for v in roots if not isinstance(v, Literal) and v not in stop]
        chosen: set[int] = set()
        while todo:
            i = self.producer.get(todo.pop())
            if i is None or i in chosen:
                continue
            chosen.add(i)
            todo.extend(v for v in self.eqns[i].invars if not isinstance(v, Literal) and v not in stop)
        return chosen

    def downstream(self, seeds, within) -> set[int]:
        """Equations of `within` that read, directly or not, an output of `seeds`."""
        tainted = {v for i in seeds for v in self.eqns[i].outvars}
        chosen = set()
        for i in sorted(within):
            if i not in seeds and any(not isinstance(v, Literal) and v in tainted for v in self.eqns[i].invars):
                chosen.add(i)
                tainted.update(self.eqns[i].outvars)
        return chosen

    def reading(self, roots) -> set[int]:
        """Every equation that reads, directly or not, one of the variables `roots`."""
        tainted, chosen = set(roots), set()
        for i, eqn in enumerate(self.eqns):
            if any(not isinstance(v, Literal) and v in tainted for v in eqn.invars):
                chosen.add(i)
                tainted.update(eqn.outvars)
        return chosen
