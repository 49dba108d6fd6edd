"""Swapping-aware recomputation: Eq. 4 as a 0/1 program solved with OR-Tools CP-SAT.

For fixed swap variables (lambda_s per adjusted stage, beta) choose, per adjusted
stage s = 0..k, which ops to recompute (x_{s,i} = 1) or the whole-unit preset
"full", to

    minimise  T_0 (Eq. 3 / 5-6 with T_C from Eq. 2; planner.time_model)
    s.t.      W_s + c_s * kept_s + work_s <= G              (memory, Eq. 1: c_s = mu_s - beta lambda_s)
              kept_s * beta <= (f_s + b_s + r_s) * B        (when lambda_s > 0: a block hides)
    with      r_s = sum_i x_i t_i           kept_s = base_s + sum_i (1 - x_i) a_i
              work_s = max over unit kinds of one unit's recomputed bytes

and, among equally fast choices, the least total recompute time, then the fewest
recomputed ops (tests/planner/recompute_oracle.py solves the same problem by
enumeration); `score_closed_form` scores any choice in floating point.

Integer scaling (CP-SAT needs integers). Bytes are counted in quanta q =
G / 2^31 (about 40 bytes at 80 GiB). Every byte amount that is *kept or stays resident* is
rounded UP (ceil(c_s a_i / q) per op, ceil for the working set), and the room
left, floor((G - W_s - c_s base_s) / q), is rounded DOWN, so an accepted choice
never needs more memory than the float model says it does: memory is never
under-predicted. The hiding constraint likewise rounds the bytes moved up and the
time that hides them down. Times are counted in quanta tau = (slowest stage step) /
10^5 and rounded to the nearest quantum: they only rank choices, so a choice may be
off the float optimum by at most a few tau (1e-5 of a step each), and every choice
is re-scored in floats by `score_closed_form`.
"""
from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from typing import Sequence

from planner.profile import FULL
from planner.time_model import finish_times, swap_hides, swap_stall

TIME_RESOLUTION = 100_000
BYTE_QUANTA = 2 ** 31


@dataclass(frozen=True)
class StageProblem:
    """One adjusted stage of Eq. 4. Op quantities are summed over the stage's units;
    `unit_op_bytes` gives, per distinct unit kind of the stage, the bytes of each op
    (same order as `ops`) in ONE unit: the working set while that unit recomputes.
    With `unit_caps` = ((count, unit fwd_time, per-op times in one unit), ...) per
    kind, a kind's recompute time is capped at its units' full recompute
    (planner.profile.UnitProfile.recompute_time); without, r = sum of op_time."""
    ops: tuple[str, ...]
    op_time: tuple[float, ...]
    op_bytes: tuple[float, ...]
    unit_op_bytes: tuple[tuple[float, ...], ...]
    base_bytes: float      # unit inputs: kept whatever is recomputed
    full_time: float       # recompute time of "full" (UnitProfile.full_recompute summed)
    fwd: float
    bwd: float
    weight_bytes: float
    resident: float        # c_s: micro-batches' worth of kept bytes at the peak
    swap_blocks: int = 0   # lambda_s
    memory_limit: float = math.inf
    full_bytes: float | None = None  # kept under "full" (default: base_bytes)
    unit_caps: tuple[tuple[int, float, tuple[float, ...]], ...] = ()

    @property
    def full_kept(self) -> float:
        return self.base_bytes if self.full_bytes is None else self.full_bytes

    def __post_init__(self) -> None:
        n = len(self.ops)
        if len(self.op_time) != n or len(self.op_bytes) != n or any(len(u) != n for u in self.unit_op_bytes) \
                or any(len(c[2]) != n for c in self.unit_caps):
            raise ValueError("StageProblem: per-op tuples must all have one entry per op")

    def recompute_time(self, on: Sequence[bool]) -> float:
        if not self.unit_caps:
            return sum(t for t, x in zip(self.op_time, on) if x)
        return sum(n * min(sum(t for t, x in zip(ts, on) if x), f) for n, f, ts in self.unit_caps)


@dataclass(frozen=True)
class RecomputeProblem:
    stages: tuple[StageProblem, ...]  # adjusted stages 0..k
    num_stages: int                   # p
    num_microbatches: int             # m
    beta: float = 0.0
    host_bandwidth: float = math.inf
    c_non: float = 0.0                # slowest step among stages k+1..p-1
    allow_full: bool = True

    @property
    def k(self) -> int:
        return len(self.stages) - 1


@dataclass(frozen=True)
class StageChoice:
    recompute: frozenset[str]
    recompute_time: float
    kept_bytes: float
    working_bytes: float
    peak_bytes: float


@dataclass(frozen=True)
class RecomputeSolution:
    stages: tuple[StageChoice, ...]
    iteration_time: float          # T_0 of the float model
    status: str = "OPTIMAL"

    @property
    def sets(self) -> tuple[frozenset[str], ...]:
        return tuple(c.recompute for c in self.stages)


def stage_choice(st: StageProblem, recompute: frozenset[str], beta: float, host_bandwidth: float
                 ) -> tuple[StageChoice, bool]:
    """Float quantities of one stage under R, and whether R satisfies its constraints."""
    full = FULL in recompute
    on = [full or n in recompute for n in st.ops]
    r = st.full_time if full else st.recompute_time(on)
    kept = st.full_kept if full else st.base_bytes + sum(a for a, x in zip(st.op_bytes, on) if not x)
    work = max((sum(a for a, x in zip(u, on) if x) for u in st.unit_op_bytes), default=0.0)
    peak = st.weight_bytes + st.resident * kept + work
    ok = peak <= st.memory_limit
    if st.swap_blocks > 0 and beta > 0:
        ok = ok and swap_hides(kept, beta, host_bandwidth, st.fwd, st.bwd, r)
    return StageChoice(frozenset(recompute), r, kept, work, peak), ok


def score_closed_form(problem: RecomputeProblem, sets: Sequence[frozenset[str]]
             ) -> tuple[bool, float, float, tuple[StageChoice, ...]]:
    """(feasible, T_0, total recompute time, per-stage quantities) in floats, by the
    paper's closed forms (planner.time_model, Eq. 2-3): the IP's own model. The
    configuration it picks is then judged by the simulator (planner.search)."""
    p, m, k = problem.num_stages, problem.num_microbatches, problem.k
    choices, feasible = [], True
    for st, r in zip(problem.stages, sets):
        c, ok = stage_choice(st, frozenset(r), problem.beta, problem.host_bandwidth)
        choices.append(c)
        feasible = feasible and ok
    c_adj = max(st.fwd + st.bwd + c.recompute_time for st, c in zip(problem.stages, choices))
    stalls = [swap_stall(st.swap_blocks, c.kept_bytes, problem.beta, problem.host_bandwidth, st.fwd,
                         st.bwd, c.recompute_time, k, s) for s, (st, c) in enumerate(zip(problem.stages, choices))]
    stalls += [0.0] * (p - len(stalls))
    t0 = finish_times(p, m, k, c_adj, problem.c_non, stalls)[0]
    return feasible, t0, sum(c.recompute_time for c in choices), tuple(choices)


def solve(problem: RecomputeProblem, time_limit: float = 10.0) -> RecomputeSolution | None:
    """Solve Eq. 4 with CP-SAT; None when no choice fits (e.g. memory too tight).
    Long: one CP-SAT model, built variable by variable as Eq. 4 reads."""
    from ortools.sat.python import cp_model  # lazy: ~0.5 s; `obscura train --plan` reads plans without it

    p, m, k = problem.num_stages, problem.num_microbatches, problem.k
    beta, bw = problem.beta, problem.host_bandwidth
    steps = [st.fwd + st.bwd + max(st.full_time, sum(st.op_time)) for st in problem.stages]
    tau = max(steps + [problem.c_non, 1e-30]) / TIME_RESOLUTION
    scale = [st.memory_limit for st in problem.stages if math.isfinite(st.memory_limit)]
    scale += [st.base_bytes + sum(st.op_bytes) for st in problem.stages]
    q = max(max(scale, default=1.0), 1e-30) / BYTE_QUANTA

    def t_units(x: float) -> int:
        return int(round(x / tau))

    model = cp_model.CpModel()
    t_next = None
    if k + 1 < p:
        t_next = t_units(problem.c_non * (m + p - k - 2))
    # C_adj, the finish times and the stalls have lower bounds only, and some optimum
    # sits at those: these upper bounds keep every optimum, and the objective small
    c_max = max(t_units(st.fwd + st.bwd) + _recompute_ub(st, t_units) for st in problem.stages)
    moved_ub = [_moved_ub(st, beta, bw, t_units) for st in problem.stages]
    horizon = (m + 2 * k + 2) * c_max + 2 * sum(moved_ub) + (t_next or 0) + 10
    c_adj = model.new_int_var(0, c_max, "C_adj")
    r_exprs, nvars, xs, fulls = [], [], [], []
    finish = [model.new_int_var(0, horizon, f"T{s}") for s in range(k + 1)]
    for s, st in enumerate(problem.stages):
        x = [model.new_bool_var(f"x{s}_{n}") for n in st.ops]
        full = model.new_bool_var(f"full{s}") if problem.allow_full else 0
        if problem.allow_full:
            for xi in x:
                model.add(xi + full <= 1)
        xs.append(x)
        fulls.append(full)
        keep = [1 - xi - full for xi in x]  # 1 when the op's output is kept
        if st.unit_caps:  # per kind: min(its ops' recompute, its units' whole forward)
            r_expr = full * t_units(st.full_time)
            for i, (count, fwd, ts) in enumerate(st.unit_caps):
                cap = t_units(fwd)
                r_kind = model.new_int_var(0, cap, f"r{s}_{i}")
                model.add_min_equality(r_kind, [sum(xi * t_units(t) for xi, t in zip(x, ts)), cap])
                r_expr = r_expr + count * r_kind
        else:
            r_expr = sum(xi * t_units(t) for xi, t in zip(x, st.op_time)) + full * t_units(st.full_time)
        r_exprs.append(r_expr)
        nvars.append(sum(x) + full * len(st.ops))
        # memory: resident kept bytes + working set <= G - W (bytes in quanta, rounded safe)
        base_term = (1 - full) * math.ceil(st.resident * st.base_bytes / q) \
            + full * math.ceil(st.resident * st.full_kept / q)
        if math.isfinite(st.memory_limit):
            room = math.floor((st.memory_limit - st.weight_bytes) / q)
            if room < 0:
                return None
            work = model.new_int_var(0, 2 ** 40, f"work{s}")
            for u in st.unit_op_bytes:
                model.add(work >= sum((xi + full) * math.ceil(a / q) for xi, a in zip(x, u)))
            model.add(sum(kv * math.ceil(st.resident * a / q) for kv, a in zip(keep, st.op_bytes))
                      + base_term + work <= room)
        stall = 0
        if st.swap_blocks > 0 and beta > 0:
            lam = st.swap_blocks
            # a block must hide under one steady forward + backward
            model.add(sum(kv * math.ceil(beta * a / q) for kv, a in zip(keep, st.op_bytes))
                      + (1 - full) * math.ceil(beta * st.base_bytes / q)
                      + full * math.ceil(beta * st.full_kept / q)
                      <= math.floor((st.fwd + st.bwd) * bw / q)
                      + r_expr * math.floor(tau * bw / q))
            moved = ((1 - full) * t_units(lam * beta * st.base_bytes / bw)
                     + full * t_units(lam * beta * st.full_kept / bw)
                     + sum(kv * t_units(lam * beta * a / bw) for kv, a in zip(keep, st.op_bytes)))
            e1 = model.new_int_var(0, moved_ub[s], f"evict{s}")
            model.add(e1 >= moved - t_units(lam * st.fwd) - (k - s) * (t_units(st.bwd) + r_expr))
            e2 = model.new_int_var(0, moved_ub[s], f"load{s}")
            model.add(e2 >= moved - lam * (t_units(st.bwd) + r_expr))
            stall = e1 + e2
        model.add(c_adj >= t_units(st.fwd + st.bwd) + r_expr)
        model.add(finish[s] >= (m + k - s) * c_adj + stall)
        after = finish[s + 1] if s < k else t_next
        if after is not None:
            model.add(finish[s] >= after + c_adj)
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 8  # the portfolio proves optimality far sooner, even on 2 cores
    solver.parameters.max_time_in_seconds = time_limit
    # Lexicographic: T_0, then total recompute, then fewest ops, then ops earlier in each
    # stage's list (equal-cost ops such as mlp_gate / mlp_up give one optimum, and the
    # portfolio returns the same sets on every run). One weighted sum where CP-SAT can
    # bound it in int64; past that (p = 16, m = 128 can be) T_0 first, then the rest
    # under T_0's optimum: the same optimum in two solves.
    total_ops = sum(len(st.ops) for st in problem.stages)
    w_r = total_ops + 1
    order = [(i + 1) * xi for x in xs for i, xi in enumerate(x)]
    w_o = sum(range(1, max((len(st.ops) for st in problem.stages), default=0) + 1)) * len(xs) + 1
    rest = (sum(r_exprs) * w_r + sum(nvars)) * w_o + sum(order)
    w_t = (sum(_recompute_ub(st, t_units) for st in problem.stages) * w_r + w_r) * w_o   # > any `rest`
    model.minimize(finish[0] * w_t + rest)
    if model.validate():     # "possible integer overflow in objective"
        model.minimize(finish[0])
        if not _solved(solver, model):
            return None
        model.add(finish[0] <= solver.value(finish[0]))
        for v in [xi for x in xs for xi in x] + [f for f in fulls if not isinstance(f, int)]:
            model.add_hint(v, solver.value(v))
        model.minimize(rest)
    status = _solved(solver, model)
    if not status:   # after a first solve its choice meets the bound: only a time-out lands here
        return None
    sets = []
    for st, x, full in zip(problem.stages, xs, fulls):
        if problem.allow_full and solver.value(full):
            sets.append(frozenset({FULL}))
        else:
            sets.append(frozenset(n for n, xi in zip(st.ops, x) if solver.value(xi)))
    ok, t0, _, choices = score_closed_form(problem, sets)
    if not ok:  # the rounding above is conservative, so this would be a bug
        raise AssertionError(f"CP-SAT choice {sets} violates the float model's constraints")
    return RecomputeSolution(choices, t0, solver.status_name(status))


def _recompute_ub(st: StageProblem, t_units) -> int:
    """At least r_expr's largest value for the stage (in time quanta)."""
    ops = sum(c * t_units(f) for c, f, _ in st.unit_caps) if st.unit_caps else sum(t_units(t) for t in st.op_time)
    return t_units(st.full_time) + ops


def _moved_ub(st: StageProblem, beta: float, bw: float, t_units) -> int:
    """At least the stage's swap transfer time `moved` (in time quanta); 0 without swaps."""
    if st.swap_blocks <= 0 or beta <= 0:
        return 0
    lam = st.swap_blocks
    return (t_units(lam * beta * st.base_bytes / bw) + t_units(lam * beta * st.full_kept / bw)
            + sum(t_units(lam * beta * a / bw) for a in st.op_bytes))


def _solved(solver, model):
    """Solve; the status when there is a solution, else None. An invalid model is
    this module's bug, not an infeasible limit: it raises."""
    from ortools.sat.python import cp_model  # lazy: as in solve()

    status = _solve_interruptibly(solver, model)
    if status == cp_model.MODEL_INVALID:
        raise AssertionError(f"recompute IP: CP-SAT rejects the model: {model.validate()}")
    return status if status in (cp_model.OPTIMAL, cp_model.FEASIBLE) else None


def _solve_interruptibly(solver, model):
    """solver.solve(model), with Ctrl-C honoured at once: CP-SAT's own SIGINT
    handler (catch_sigint_signal, on by default) would end the search quietly and the
    plan would go on, and Python's handler cannot run while the native solve holds
    the main thread. So the solve runs in a helper thread (it releases the GIL), the
    main thread waits where KeyboardInterrupt can land, and an interrupt stops the
    search before it propagates."""
    solver.parameters.catch_sigint_signal = False
    result: list = []
    done = threading.Event()    # not Thread.join: an interrupted join marks a running thread
                                # stopped (CPython 3.11, bpo-45274), and a later join returns at once

    def run():
        try:
            result.append(solver.solve(model))
        finally:
            done.set()
    worker = threading.Thread(target=run, daemon=True, name="obscura-cp-sat")
    try:
        worker.start()      # inside: an interrupt may land while the thread starts
        while not done.wait(0.05):
            pass
    except KeyboardInterrupt:
        solver.stop_search()
        if worker.ident is not None:
            done.wait()
        raise
    return result[0]
