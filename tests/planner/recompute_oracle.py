"""The recompute IP's test oracle: the same problem (planner.recompute.recompute_ip) solved by
enumerating every op subset, and "full", of every adjusted stage."""
from __future__ import annotations

import itertools

from planner.profile import FULL
from planner.recompute.recompute_ip import RecomputeProblem, RecomputeSolution, score_closed_form


def _key(problem, sets):
    ok, t0, rsum, _ = score_closed_form(problem, sets)
    nops = sum(len(problem.stages[s].ops) if FULL in r else len(r) for s, r in enumerate(sets))
    return ok, (t0, rsum, nops)


def brute_force(problem: RecomputeProblem) -> RecomputeSolution | None:
    """Enumerate every op subset (and "full") of every stage; exponential."""
    options = []
    for st in problem.stages:
        subsets = [frozenset(c) for n in range(len(st.ops) + 1) for c in itertools.combinations(st.ops, n)]
        if problem.allow_full:
            subsets.append(frozenset({FULL}))
        options.append(subsets)
    best, best_key = None, None
    for sets in itertools.product(*options):
        ok, key = _key(problem, sets)
        if ok and (best_key is None or key < best_key):
            best, best_key = sets, key
    if best is None:
        return None
    _, t0, _, choices = score_closed_form(problem, best)
    return RecomputeSolution(choices, t0, "BRUTE_FORCE")
