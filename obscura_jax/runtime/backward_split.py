"""The split backward at its real cost: one stage's forward + backward jaxpr cut into
I (what the upstream stage waits for) and W (the weight gradients nobody waits for).

    (params, x[, targets], dy) -> (dparams..., dx, residual leaves...)   one flat jaxpr
         forward part: computes the residual leaves     (run by F, never by I)
         backward part: reads params, residual leaves, dy

    I = the cotangent chain dx needs (the policy's recompute included, run once),
        and every other equation the weight gradients need that is not a weight
        contraction or fed by one: the cotangent-free recompute W's inputs need,
        and the reductions that make small parameter gradients out of large
        tensors (norm scales' and biases' sums over tokens), whose small results
        I adds to the gradients itself (`at_once`)
    W = the weight contractions (a dot_general with free dimensions on both
        operands, or a convolution, that reads a cotangent and feeds only weight
        gradients: x^T dy per weight matmul), what they feed (transposes, casts to
        the param dtype, sums of partial gradients), and what only W reads when
        moving it into W holds no more bytes (a reshape of a value W holds anyway,
        zeros for an unused parameter)

`held` is what W reads that I computed: per weight matmul its output cotangent and,
where the forward did not keep it, its input (recomputed in I), each once however
many matmuls share it (q, k, v read one normalised input). `kept` are the residual
leaves (and inputs: dy) W reads directly, never copied into `held` (a reshape of
one moves into W). Everything else
is freed when I ends. So W holds the weight matmuls' inputs and output cotangents
in the dtypes the model computes them in, and nothing else: the norms' float32
intermediates, which only the scale's sum reads, die in I.

`at_once`: the weight gradients I computes entirely and returns (the caller adds
them to the accumulator in I, so W holds nothing for them): those asked for (the
head's, when its W holds more than deferring it is worth: obscura_jax.runtime.
weight_grad) and every one I finished anyway (the norm scales' and biases' sums).

`rederive`: W recomputes every cotangent-free value it reads from the inputs of the
stage's checkpoint regions (each model unit runs under one `jax.checkpoint`; the
regions' inputs are marked, obscura_jax.runtime.flat_jaxpr), walking back through the
forward part where the forward kept the value and through I's recompute where it
did not. W then holds only cotangents and the regions' inputs (residual leaves
under every policy); it pays with a second forward of what it reads (norms,
attention, the MLP's gating), run in W. In fp32 its gradients equal the fused
backward's bit for bit; in 16-bit compute they differ by rounding, as any recompute's
do (XLA normalises a unit's input inside the forward's fusion before storing it in
16 bits; W normalises the stored value).

This is the graph cut torch.distributed.pipelining makes on autograd graphs
(stage_backward_input / stage_backward_weight), made here on the jaxpr, with call-like
equations inlined (obscura_jax.runtime.flat_jaxpr); each half is evaluated equation
by equation under `jit`. Control flow (scan, cond, while) stays whole: an equation
that feeds both dx and dparams lands in I, and W then holds its weight-gradient
outputs. With no dx (a stage that takes tokens) nothing waits for I, but the cut is
the same: I runs the cotangent chain, W the weight contractions, and W holds no more
than on any other stage (the embedding's gradient, a scatter of the cotangent into
the table, is finished in I).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from jax.extend.core import Literal

from obscura_jax.runtime.flat_jaxpr import Graph, bind, flat_jaxpr, marked_inputs, nbytes, read

_CONTRACTIONS = ("dot_general", "conv_general_dilated")


def _is_weight_contraction(eqn) -> bool:
    """A matmul or convolution, not a reduction spelled as a contraction: a
    dot_general with a free dimension on each operand (x^T dy: [in] x [out]); one whose
    every dimension is contracted or batched ('btd,btd->d', a norm scale's sum) is a
    reduction and stays in I."""
    if eqn.primitive.name == "conv_general_dilated":
        return True
    if eqn.primitive.name != "dot_general":
        return False
    (lc, rc), (lb, rb) = eqn.params["dimension_numbers"]
    lhs, rhs = (len(v.aval.shape) for v in eqn.invars)
    return lhs > len(lc) + len(lb) and rhs > len(rc) + len(rb)


@dataclass(frozen=True)
class BackwardSplit:
    """The cut of one flat forward + backward jaxpr. Inputs: the flat args the traced
    function took, then the residual leaves (values of its trailing outputs); an
    input a half does not read may be None. `held_vars`: what I hands W;
    `w_args` / `w_residuals`: the args / residual leaves W reads directly;
    `at_once`: the dparams I computes (returned by `input_grad`), `w_dparams` the
    ones W returns."""
    jaxpr: Any
    consts: tuple
    num_dparams: int
    num_dx: int
    residual_vars: tuple
    i_eqns: tuple[int, ...]
    w_eqns: tuple[int, ...]
    held_vars: tuple
    w_args: tuple[int, ...]
    w_residuals: tuple[int, ...]
    at_once: tuple[int, ...] = ()

    @property
    def held_avals(self) -> tuple:
        return tuple(v.aval for v in self.held_vars)

    @property
    def held_bytes(self) -> int:
        return sum(nbytes(v) for v in self.held_vars)

    @property
    def w_dparams(self) -> tuple[int, ...]:
        return tuple(k for k in range(self.num_dparams) if k not in self.at_once)

    def input_grad(self, args, residuals=()) -> tuple[list, list, list]:
        """I: (dx outputs, held values, the `at_once` dparams)."""
        env = self._run(self.i_eqns, self._env(args, residuals))
        outs = self.jaxpr.outvars
        dx = [read(env, v) for v in outs[self.num_dparams:self.num_dparams + self.num_dx]]
        return dx, [env[v] for v in self.held_vars], [read(env, outs[k]) for k in self.at_once]

    def weight_grad(self, args, residuals, held) -> list:
        """W: the `w_dparams` from what it reads directly and I's held values."""
        env = self._env(args, residuals)
        env.update(zip(self.held_vars, held))
        env = self._run(self.w_eqns, env)
        return [read(env, self.jaxpr.outvars[k]) for k in self.w_dparams]

    def _env(self, args, residuals) -> dict:
        env = dict(zip(self.jaxpr.constvars, self.consts))
        env.update((v, a) for v, a in zip(self.jaxpr.invars, args) if a is not None)
        env.update((v, a) for v, a in zip(self.residual_vars, residuals)
                   if a is not None and not isinstance(v, Literal))
        return env

    def _run(self, which, env: dict) -> dict:
        eqns = self.jaxpr.eqns
        for i in which:
            env.update(zip(eqns[i].outvars, bind(eqns[i], [read(env, v) for v in eqns[i].invars])))
        return env


def split_backward(backward: Callable, arg_specs: list, num_dparams: int,
                   cotangent_args: tuple[int, ...] = (-1,), *, residuals: int = 0, rederive: bool = False,
                   at_once: tuple[int, ...] = ()) -> BackwardSplit:
    """Trace `backward(*flat args) -> flat (dparams..., dx..., residual leaves...)` and
    cut it (module docstring). The first `num_dparams` args are the parameters, in
    the dparams' order; `cotangent_args`: the positions of the incoming cotangents
    (dy); `residuals`: how many trailing outputs are residual leaves, values both
    halves receive instead of computing (none: the args are all there is)."""
    flat = flat_jaxpr(backward, arg_specs)
    jaxpr = flat.jaxpr
    g = Graph(jaxpr)
    n_out = len(jaxpr.outvars) - residuals
    dparams, dx, res = jaxpr.outvars[:num_dparams], jaxpr.outvars[num_dparams:n_out], jaxpr.outvars[n_out:]
    stop = frozenset(v for v in res if not isinstance(v, Literal))
    w_need = g.upstream(dparams, stop)
    at_once = set(at_once)
    w_out = [dparams[k] for k in range(num_dparams) if k not in at_once]
    # with no dx (a stage that takes tokens) I still runs the cotangent chain the weight
    # contractions read, so W holds what it does on every other stage
    on_cotangents = g.reading([jaxpr.invars[k] for k in cotangent_args])
    if dx:
        i_need = g.upstream(dx, stop)
    else:       # tokens in: the embedding's gradient (a scatter-add of its output's cotangent) plays dx
        scatters = [i for i in sorted(w_need & on_cotangents) if g.eqns[i].primitive.name == "scatter-add"]
        i_need = g.upstream([v for i in scatters for v in g.eqns[i].outvars], stop)
    once = g.upstream([dparams[k] for k in at_once], stop)
    forced = i_need | once | (w_need - on_cotangents)      # closed upstream: W never feeds I
    weight_ops = {i for i in w_need - forced if _is_weight_contraction(g.eqns[i])}
    in_w = weight_ops | g.downstream(weight_ops, w_need - forced)
    free = frozenset(jaxpr.invars[:num_dparams]) | frozenset(jaxpr.constvars)
    in_w = _sink(g, w_need - i_need - once - in_w, in_w, w_out, free, i_need | w_need)
    made_by_w = {v for i in in_w for v in g.eqns[i].outvars}
    at_once |= {k for k, v in enumerate(dparams) if v not in made_by_w}   # I adds what it finished
    w_out = [dparams[k] for k in range(num_dparams) if k not in at_once]
    if rederive:
        derived = {v for i in on_cotangents for v in g.eqns[i].outvars}
        derived.update(jaxpr.invars[k] for k in cotangent_args)
        sources = (set(jaxpr.invars) | set(jaxpr.constvars) | (marked_inputs(jaxpr) & stop)) - derived
        in_w = _rederive(g, in_w, w_out, sources, derived)
    return _finish(flat, g, num_dparams, dx, res, stop, in_w, w_out, tuple(sorted(at_once)))


def _finish(flat, g: Graph, num_dparams: int, dx, res, stop, in_w, w_out, at_once) -> BackwardSplit:
    """The BackwardSplit of the chosen W: what it reads, sorted by where it comes from,
    and I = what dx, the at-once dparams and W's held values need."""
    jaxpr = flat.jaxpr
    held, w_res, w_args = [], set(), set()
    position = {v: k for k, v in enumerate(res) if not isinstance(v, Literal)}
    invar_at = {v: k for k, v in enumerate(jaxpr.invars)}
    for v in _w_reads(g, in_w, w_out):
        if v in stop:
            w_res.add(position[v])
        elif v in invar_at:
            w_args.add(invar_at[v])
        elif v not in jaxpr.constvars:
            held.append(v)
    in_i = g.upstream(list(dx) + held + [jaxpr.outvars[k] for k in at_once], stop)
    missing = set(held) - {v for i in in_i for v in g.eqns[i].outvars}
    if missing:
        raise AssertionError(f"W reads {sorted(map(str, missing))}, which neither I nor the inputs provide")
    return BackwardSplit(jaxpr, tuple(flat.consts), num_dparams, len(dx), tuple(res), tuple(sorted(in_i)),
                         tuple(sorted(in_w)), tuple(held), tuple(sorted(w_args)), tuple(sorted(w_res)), at_once)


def _w_reads(g: Graph, in_w, w_out) -> list:
    """What W's equations and outputs read that W does not compute, in first-read order."""
    made = {v for i in in_w for v in g.eqns[i].outvars}
    reads: dict = {}
    for v in [v for i in sorted(in_w) for v in g.eqns[i].invars] + list(w_out):
        if not isinstance(v, Literal) and v not in made:
            reads.setdefault(v, None)
    return list(reads)


def _sink(g: Graph, candidates, in_w: set, w_out, free, live) -> set:
    """Move into W, last first, each candidate whose every output only W reads (of
    the `live` equations), when W then holds no more bytes (its new inputs cost no
    more than the outputs it no longer needs held): a reshape or cast of a value W
    holds anyway, a constant."""
    in_w, outs = set(in_w), set(w_out)
    reads = set(_w_reads(g, in_w, w_out))
    for i in sorted(candidates, reverse=True):
        eqn = g.eqns[i]
        if not set().union(*(g.consumers[v] for v in eqn.outvars)) & live <= in_w:
            continue
        gained = sum(nbytes(v) for v in {v for v in eqn.invars if not isinstance(v, Literal)}
                     if v not in reads and v not in free)
        # a weight gradient I finishes costs W nothing: I adds it to the accumulator
        freed = sum(nbytes(v) for v in eqn.outvars if v in reads and v not in outs)
        if gained <= freed:
            in_w.add(i)
            reads = set(_w_reads(g, in_w, w_out))
    return in_w


def _rederive(g: Graph, in_w: set, w_out, sources: set, derived: set) -> set:
    """W plus the producers of every cotangent-free value it reads, back to `sources`."""
    in_w = set(in_w)
    todo = _w_reads(g, in_w, w_out)
    while todo:
        v = todo.pop()
        if isinstance(v, Literal) or v in sources or v in derived:
            continue
        i = g.producer.get(v)
        if i is not None and i not in in_w:
            in_w.add(i)
            todo.extend(g.eqns[i].invars)
    return in_w
