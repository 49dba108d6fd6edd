"""Test helpers: an independent longest-path timing of a schedule (it shares no code
with schedules.simulator or schedules.deps: its graph is built here from the rules
in the simulator's docstring), one that reads an exported schedule file with plain
json, and schedule corruptions."""
from __future__ import annotations

import json
import re

from schedules.ir import Action, Kind, Schedule, StageSpec
from schedules.formats.text import format_grid

_LONG = re.compile(r"^(\d+)(SO|SI|F|B|I|W)(\d+)$")
_SHORT = re.compile(r"^(SO|SI|F|B|I|W)(\d+)$")


def _graph_times(rows, where, adjusted, beta, p, costs):
    """rows: per device, (stage, kind string, micro-batch) in order. Returns
    {(stage, "F3"): (start, end)} by Kahn's algorithm on the dependency graph."""
    ops = {(s, k, x) for row in rows for s, k, x in row}
    split = {(s, x) for s, k, x in ops if k == "W"}

    def bwd_in(s, x):     # the step of (s, x) that sends its gradient upstream
        return (s, "I", x) if (s, "I", x) in ops else (s, "B", x)

    def lag(a, b):        # producer a -> consumer b
        if a[0] == b[0] or where[a[0]] == where[b[0]]:
            return 0.0
        return costs.p2p_time(min(a[0], b[0]))

    dur, preds = {}, {}
    for row in rows:
        last = {"compute": None, "SO": None, "SI": None}
        for node in row:
            s, k, x = node
            ps = []
            rec = costs.recompute[s] if s in adjusted else 0.0
            if k == "F":
                dur[node] = costs.fwd[s]
                if s > 0:
                    ps.append((s - 1, "F", x))
            elif k in ("B", "I"):
                half = k == "I" or (s, x) in split
                if half:
                    base = (costs.input_grad[s] if costs.input_grad
                            else costs.bwd[s] * (1 - costs.weight_grad_fraction))
                else:
                    base = costs.bwd[s]
                dur[node] = base + rec
                ps.append((s, "F", x))
                if s < p - 1:
                    ps.append(bwd_in(s + 1, x))
                if (s, "SI", x) in ops:
                    ps.append((s, "SI", x))
            elif k == "W":
                dur[node] = costs.weight_grad[s] if costs.weight_grad else costs.bwd[s] * costs.weight_grad_fraction
                ps.append(bwd_in(s, x))
            else:
                kept = costs.act_bytes_recompute[s] if s in adjusted else costs.act_bytes[s]
                dur[node] = kept * beta[s] / costs.host_bandwidth
                ps.append((s, "F", x) if k == "SO" else (s, "SO", x))
            edges = [(q, lag(q, node)) for q in ps]
            if k in ("F", "B", "I", "W"):
                if last["compute"] is not None:
                    edges.append((last["compute"], 0.0))
                last["compute"] = node
            else:
                for q in (last["compute"], last[k]) + ((last["SO"],) if k == "SI" else ()):
                    if q is not None:
                        edges.append((q, 0.0))
                last[k] = node
            preds[node] = edges
    indeg = {n: 0 for n in preds}
    succ = {n: [] for n in preds}
    for n, es in preds.items():
        for q, lg in es:
            succ[q].append((n, lg))
            indeg[n] += 1
    start = {n: 0.0 for n in preds}
    ready = [n for n in preds if indeg[n] == 0]
    done = {}
    while ready:
        n = ready.pop()
        done[n] = (start[n], start[n] + dur[n])
        for q, lg in succ[n]:
            start[q] = max(start[q], done[n][1] + lg)
            indeg[q] -= 1
            if indeg[q] == 0:
                ready.append(q)
    assert len(done) == len(preds), "dependency graph has a cycle"
    return {(s, f"{k}{x}"): t for (s, k, x), t in done.items()}


def longest_path_times(schedule: Schedule, costs) -> dict[tuple[int, str], tuple[float, float]]:
    """Start/end of every action as the longest path in the dependency graph."""
    rows = [[(a.stage, a.kind.value, a.microbatch) for a in row] for row in schedule.rows]
    beta = [spec.swap_fraction for spec in schedule.stages]
    return _graph_times(rows, schedule.stage_to_device, set(schedule.adjusted_stages), beta,
                        schedule.num_stages, costs)


def longest_path_of_file(path, costs) -> float:
    """Makespan of an exported schedule file (obscura-schedule/2 or /1), read with
    plain json: the independent re-simulation the acceptance asks for."""
    data = json.loads(open(path).read())
    p = data["num_stages"]
    if data["format"] == "obscura-schedule/1":
        where = list(range(p))
        rows = [[(s, *_short(a)) for a in st["actions"]] for s, st in enumerate(data["stages"])]
    else:
        where = data["stage_to_device"]
        rows = [[_long(a) for a in row] for row in data["devices"]]
    adjusted = {s for s, st in enumerate(data["stages"]) if st.get("recompute")}
    beta = [st.get("swap_fraction", 0.0) for st in data["stages"]]
    times = _graph_times(rows, where, adjusted, beta, p, costs)
    return max(e for _, e in times.values())


def _long(text):
    m = _LONG.match(text)
    return int(m.group(1)), m.group(2), int(m.group(3))


def _short(text):
    m = _SHORT.match(text)
    return m.group(1), int(m.group(2))


def replace_row(schedule: Schedule, device: int, actions) -> Schedule:
    """`schedule` with device `device`'s row replaced (stage settings kept)."""
    if schedule.one_stage_per_device:
        stages = list(schedule.stages)
        s = schedule.stages_on(device)[0]
        spec = stages[s]
        stages[s] = StageSpec(tuple(actions), spec.recompute, spec.swap_fraction, spec.swap_blocks)
        return Schedule(schedule.name, schedule.num_stages, schedule.num_microbatches, tuple(stages),
                        schedule.stage_to_device)
    rows = list(schedule.rows)
    rows[device] = tuple(actions)
    specs = tuple(StageSpec((), sp.recompute, sp.swap_fraction, sp.swap_blocks) for sp in schedule.stages)
    return Schedule(schedule.name, schedule.num_stages, schedule.num_microbatches, specs,
                    schedule.stage_to_device, tuple(rows))


def corrupt(schedule: Schedule, how: str, stage: int, pick: int) -> Schedule:
    """Drop a forward or backward, duplicate any action, or swap two same-kind ones
    of one stage (which breaks micro-batch order) or move a backward before its F,
    in the row of device `stage` (== the stage with one stage per device)."""
    device = stage
    row = list(schedule.rows[device])
    fb = [i for i, a in enumerate(row) if a.kind in (Kind.F, Kind.B, Kind.I)]
    if how == "drop":
        del row[fb[pick % len(fb)]]
    elif how == "duplicate":
        i = pick % len(row)
        row.insert(i + 1, row[i])
    elif how == "swap_same_kind":
        a = row[fb[pick % len(fb)]]
        same = [i for i, b in enumerate(row) if b.kind == a.kind and b.stage == a.stage]
        j = same.index(row.index(a))
        i1, i2 = (same[j], same[j + 1]) if j + 1 < len(same) else (same[j - 1], same[j])
        row[i1], row[i2] = row[i2], row[i1]
    elif how == "b_before_f":
        a = row[fb[pick % len(fb)]]
        back = next(b for b in row if b.stage == a.stage and b.microbatch == a.microbatch
                    and b.kind in (Kind.B, Kind.I))
        moved = row.pop(row.index(back))
        row.insert(row.index(Action(a.stage, Kind.F, a.microbatch)), moved)
    else:
        raise ValueError(how)
    return replace_row(schedule, device, row)


def schedule_text(schedule) -> str:
    """Header + grid: the golden-file form of a schedule."""
    head = (f"# {schedule.name}: {schedule.num_stages} stages, {schedule.num_microbatches} micro-batches"
            + ("" if schedule.one_stage_per_device else
               f", {schedule.num_devices} devices, stage -> device {list(schedule.stage_to_device)}") + "\n"
            + "".join(f"# stage {s}: recompute={list(spec.recompute)} swap_blocks={spec.swap_blocks} "
                      f"swap_fraction={spec.swap_fraction:g}\n"
                      for s, spec in enumerate(schedule.stages) if spec.recompute or spec.swap_blocks))
    return head + format_grid(schedule.grid(), labels=schedule.row_labels()) + "\n"
