"""Test helpers: an independent longest-path timing of a schedule (it shares no code
with schedules.simulator) and schedule corruptions."""
from __future__ import annotations

from schedules.ir import Action, Kind, Schedule, StageSpec


def longest_path_times(schedule: Schedule, costs) -> dict[tuple[int, str], tuple[float, float]]:
    """Start/end of every action as the longest path in the dependency graph built
    from the rules in the simulator's docstring (graph + Kahn's algorithm)."""
    p = schedule.num_stages
    nodes, dur, preds = [], {}, {}
    has_w = {(s, a.microbatch) for s in range(p) for a in schedule.actions(s) if a.kind == Kind.W}
    for s in range(p):
        spec = schedule.stages[s]
        last = {"compute": None, "SO": None, "SI": None}
        for a in spec.actions:
            key = (s, str(a))
            nodes.append(key)
            x = a.microbatch
            ps = []
            k = a.kind.value
            if k == "F":
                dur[key] = costs.fwd[s]
                if s > 0:
                    ps.append(((s - 1, f"F{x}"), costs.p2p_time(s - 1)))
            elif k == "B":
                share = costs.weight_grad_fraction if (s, x) in has_w else 0.0
                dur[key] = costs.bwd[s] * (1 - share) + (costs.recompute[s] if spec.adjusted else 0.0)
                ps.append(((s, f"F{x}"), 0.0))
                if s < p - 1:
                    ps.append(((s + 1, f"B{x}"), costs.p2p_time(s)))
                if any(b.kind == Kind.SI and b.microbatch == x for b in spec.actions):
                    ps.append(((s, f"SI{x}"), 0.0))
            elif k == "W":
                dur[key] = costs.bwd[s] * costs.weight_grad_fraction
                ps.append(((s, f"B{x}"), 0.0))
            else:
                adj = spec.adjusted
                kept = costs.act_bytes_recompute[s] if adj else costs.act_bytes[s]
                dur[key] = kept * spec.swap_fraction / costs.host_bandwidth
                ps.append(((s, f"F{x}") if k == "SO" else (s, f"SO{x}"), 0.0))
                if last["compute"] is not None:
                    ps.append((last["compute"], 0.0))
                if last[k] is not None:
                    ps.append((last[k], 0.0))
                if k == "SI" and last["SO"] is not None:
                    ps.append((last["SO"], 0.0))
            if k in ("F", "B", "W"):
                if last["compute"] is not None:
                    ps.append((last["compute"], 0.0))
                last["compute"] = key
            else:
                last[k] = key
            preds[key] = ps
    indeg = {n: 0 for n in nodes}
    succ = {n: [] for n in nodes}
    for n, ps in preds.items():
        for q, lag in ps:
            succ[q].append((n, lag))
            indeg[n] += 1
    start = {n: 0.0 for n in nodes}
    ready = [n for n in nodes if indeg[n] == 0]
    done = {}
    while ready:
        n = ready.pop()
        done[n] = (start[n], start[n] + dur[n])
        for q, lag in succ[n]:
            start[q] = max(start[q], done[n][1] + lag)
            indeg[q] -= 1
            if indeg[q] == 0:
                ready.append(q)
    assert len(done) == len(nodes), "dependency graph has a cycle"
    return done


def replace_row(schedule: Schedule, stage: int, actions) -> Schedule:
    stages = list(schedule.stages)
    spec = stages[stage]
    stages[stage] = StageSpec(tuple(actions), spec.recompute, spec.swap_fraction, spec.swap_blocks)
    return Schedule(schedule.name, schedule.num_stages, schedule.num_microbatches, tuple(stages))


def corrupt(schedule: Schedule, how: str, stage: int, pick: int) -> Schedule:
    """Drop an F/B, duplicate any action, or swap two same-kind F/B actions (which
    breaks micro-batch order) or move a B before its F."""
    row = list(schedule.actions(stage))
    fb = [i for i, a in enumerate(row) if a.kind in (Kind.F, Kind.B)]
    if how == "drop":
        del row[fb[pick % len(fb)]]
    elif how == "duplicate":
        i = pick % len(row)
        row.insert(i + 1, row[i])
    elif how == "swap_same_kind":
        a = row[fb[pick % len(fb)]]
        same = [i for i, b in enumerate(row) if b.kind == a.kind]
        j = same.index(row.index(a))
        i1, i2 = (same[j], same[j + 1]) if j + 1 < len(same) else (same[j - 1], same[j])
        row[i1], row[i2] = row[i2], row[i1]
    elif how == "b_before_f":
        x = row[fb[pick % len(fb)]].microbatch
        b = row.index(Action(stage, Kind.B, x))
        moved = row.pop(b)
        row.insert(row.index(Action(stage, Kind.F, x)), moved)
    else:
        raise ValueError(how)
    return replace_row(schedule, stage, row)
