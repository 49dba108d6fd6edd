"""The one dependency rule: which actions an action waits on (data dependencies).

    F(s, x)        F(s-1, x)                                  the activation arrives
    B/I(s, x)      F(s, x); B/I(s+1, x) unless s is last;     the gradient arrives
                   SI(s, x) when the block was swapped out
    W(s, x)        I(s, x)  (B(s, x) in the older B+W spelling)
    SO(s, x)       F(s, x)
    SI(s, x)       SO(s, x)

B/I(s+1, x) is whichever backward-input step stage s+1 runs for x (I when it splits
its backward, else B). Besides these, every device runs its row in order: that is
the stream order each consumer keeps itself (the validator's and simulator's row
pointers, the issue order's row edges, the engine's lanes), not a data dependency.

Used by the validator (deadlock check), the simulator, the issue order, the
timeline's comm_wait, the relaxation generators and obscura_jax.events.
"""
from __future__ import annotations

from typing import Callable, Container, Sequence

from schedules.ir import Action, Kind, Schedule


Key = tuple  # (stage, kind value, micro-batch), e.g. (2, "F", 0): the hashable form hot loops use


def _rule(s: int, k: str, x: int, has: Callable[[int, str, int], bool], num_stages: int) -> tuple[Key, ...]:
    """THE rule, on keys; `has(stage, kind, mb)` says whether the schedule has that action."""
    if k == "F":
        return ((s - 1, "F", x),) if s > 0 else ()
    if k == "B" or k == "I":
        deps = [(s, "F", x)]
        if s < num_stages - 1:
            deps.append((s + 1, "I", x) if has(s + 1, "I", x) else (s + 1, "B", x))
        if has(s, "SI", x):
            deps.append((s, "SI", x))
        return tuple(deps)
    if k == "W":
        return ((s, "I", x) if has(s, "I", x) else (s, "B", x),)
    if k == "SO":
        return ((s, "F", x),)
    return ((s, "SO", x),)    # SI


def dependency_keys(key: Key, present: Container[Key], num_stages: int) -> tuple[Key, ...]:
    """The rule on keys (stage, kind value, micro-batch) among the `present` keys."""
    return _rule(key[0], key[1], key[2], lambda s, k, x: (s, k, x) in present, num_stages)


def dependency_table(present, num_stages: int) -> dict[Key, tuple[Key, ...]]:
    """dependency_keys of every key in `present` (a set of keys), in one pass."""
    def has(s: int, k: str, x: int) -> bool:
        return (s, k, x) in present
    return {key: _rule(key[0], key[1], key[2], has, num_stages) for key in present}


def dependency_waits(present, num_stages: int, stage_to_device, boundary_lag: Sequence[float]
                     ) -> dict[Key, tuple[tuple[Key, float], ...]]:
    """Every key in `present` -> what it waits on, each with its key_lag: the table a
    simulation walks (one pass)."""
    return {key: tuple((dep, key_lag(dep, key, stage_to_device, boundary_lag)) for dep in on)
            for key, on in dependency_table(present, num_stages).items()}


def backward_input(stage: int, microbatch: int, present: Container[Action]) -> Action:
    """The step of (stage, micro-batch) that sends its gradient upstream: I if the
    stage splits that backward, else B."""
    i = Action(stage, Kind.I, microbatch)
    return i if i in present else Action(stage, Kind.B, microbatch)


def dependencies(action: Action, present: Container[Action], num_stages: int) -> tuple[Action, ...]:
    """The actions `action` waits on, among a schedule whose actions are `present`
    (a set, or any container) and which has `num_stages` stages."""
    deps = _rule(action.stage, action.kind.value, action.microbatch,
                 lambda s, k, x: Action(s, Kind(k), x) in present, num_stages)
    return tuple(Action(s, Kind(k), x) for s, k, x in deps)


def dependency_map(schedule: Schedule) -> dict[Action, tuple[Action, ...]]:
    """Every action of `schedule` -> what it waits on (computed once per schedule)."""
    present = {a for row in schedule.rows for a in row}
    return {a: dependencies(a, present, schedule.num_stages) for a in present}


def key_lag(dep: Key, key: Key, stage_to_device, boundary_lag: Sequence[float]) -> float:
    """Time a dependency's output takes to reach the action: the p2p transfer over the
    boundary between the two stages (boundary_lag[s]: stage s to s+1, e.g.
    StageCosts.p2p_time) when they run on different devices, else 0."""
    if dep[0] == key[0] or stage_to_device[dep[0]] == stage_to_device[key[0]]:
        return 0.0
    return boundary_lag[min(dep[0], key[0])]


def transfer_lag(dep: Action, action: Action, stage_to_device, boundary_lag: Sequence[float]) -> float:
    """key_lag for Actions."""
    return key_lag((dep.stage,), (action.stage,), stage_to_device, boundary_lag)
