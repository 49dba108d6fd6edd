"""The layout space: micro-batch x PP x TP (x SP where TP > 1) x recompute policy x
attention implementation, at a fixed global batch on a fixed number of GPUs.

    DP = gpus / (PP * TP)                 must be an integer
    m  = global_batch / (DP * micro_batch) micro-batches per pipeline, integer >= 1

Layouts that break a divisibility rule are skipped with the reason, so a sweep
can say why a corner of the grid is empty.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from models.config import ModelConfig
from planner.errors import PlanError

POLICIES = ("none", "selective", "mlp", "cmb", "full")
ATTENTIONS = ("xla", "cudnn")


@dataclass(frozen=True, order=True)
class Layout:
    micro_batch: int
    tp: int
    pp: int
    sp: bool
    policy: str
    attention: str
    dp: int
    num_microbatches: int

    @property
    def gpus(self) -> int:
        return self.dp * self.tp * self.pp

    @property
    def label(self) -> str:
        """The layouts paper's notation: mbs/TP/PP/SP."""
        return f"{self.micro_batch}/{self.tp}/{self.pp}/{'on' if self.sp else 'off' if self.tp > 1 else '-'}"

    def to_json(self) -> dict:
        return {"micro_batch": self.micro_batch, "tp": self.tp, "pp": self.pp, "sp": self.sp,
                "dp": self.dp, "num_microbatches": self.num_microbatches, "policy": self.policy,
                "attention": self.attention}


def _ints(name: str, values) -> tuple[int, ...]:
    vals = tuple(values)
    if not vals:
        raise PlanError(f"the {name} list is empty")
    for v in vals:
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise PlanError(f"{name} values must be positive integers, got {v!r}")
    return tuple(sorted(set(vals)))


def _names(name: str, values, valid: tuple[str, ...]) -> tuple[str, ...]:
    vals = tuple(values)
    if not vals:
        raise PlanError(f"the {name} list is empty")
    bad = [v for v in vals if v not in valid]
    if bad:
        raise PlanError(f"unknown {name} {bad[0]!r}; valid: {', '.join(valid)}")
    return tuple(v for v in valid if v in vals)


@dataclass(frozen=True)
class LayoutGrid:
    gpus: int
    global_batch: int
    micro_batches: tuple[int, ...] = (1, 2, 4)
    pps: tuple[int, ...] = (1, 2, 4, 8)
    tps: tuple[int, ...] = (1, 2)
    policies: tuple[str, ...] = POLICIES
    attentions: tuple[str, ...] = ATTENTIONS
    sequence_parallel: tuple[bool, ...] = (False, True)   # tried where TP > 1

    def __post_init__(self) -> None:
        for name in ("gpus", "global_batch"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise PlanError(f"{name.replace('_', ' ')} must be a positive integer, got {v!r}")
        object.__setattr__(self, "micro_batches", _ints("micro-batch", self.micro_batches))
        object.__setattr__(self, "pps", _ints("PP", self.pps))
        object.__setattr__(self, "tps", _ints("TP", self.tps))
        object.__setattr__(self, "policies", _names("policy", self.policies, POLICIES))
        object.__setattr__(self, "attentions", _names("attention", self.attentions, ATTENTIONS))
        sp = tuple(sorted(set(bool(v) for v in self.sequence_parallel)))
        if not sp:
            raise PlanError("the sequence-parallel list is empty")
        object.__setattr__(self, "sequence_parallel", sp)


def _model_parallel_problem(cfg: ModelConfig, tp: int, pp: int, gpus_per_node: int) -> str | None:
    if tp > gpus_per_node:
        return f"TP {tp} spans more than a node ({gpus_per_node} GPUs)"
    for what, n in (("heads", cfg.num_heads), ("kv heads", cfg.num_kv_heads),
                    ("ffn hidden", cfg.ffn_hidden)):
        if n % tp:
            return f"{what} {n} not divisible by TP {tp}"
    if pp > cfg.num_units:
        return f"PP {pp} exceeds the {cfg.num_units} units"
    return None


def enumerate_layouts(grid: LayoutGrid, cfg: ModelConfig, gpus_per_node: int = 8
                      ) -> tuple[list[Layout], list[tuple[str, str]]]:
    """All layouts of the grid that the divisibility rules allow, and (description,
    reason) for every (micro-batch, TP, PP) combination that was skipped."""
    layouts: list[Layout] = []
    skipped: list[tuple[str, str]] = []
    for mbs in grid.micro_batches:
        for tp in grid.tps:
            for pp in grid.pps:
                where = f"mbs {mbs} TP {tp} PP {pp}"
                if grid.gpus % (pp * tp):
                    skipped.append((where, f"{grid.gpus} GPUs not divisible by PP*TP = {pp * tp}"))
                    continue
                problem = _model_parallel_problem(cfg, tp, pp, gpus_per_node)
                if problem:
                    skipped.append((where, problem))
                    continue
                dp = grid.gpus // (pp * tp)
                if grid.global_batch % (dp * mbs):
                    skipped.append((where, f"global batch {grid.global_batch} not divisible by "
                                           f"DP*mbs = {dp * mbs}"))
                    continue
                m = grid.global_batch // (dp * mbs)
                for sp in (grid.sequence_parallel if tp > 1 else (False,)):
                    for policy in grid.policies:
                        for attention in grid.attentions:
                            layouts.append(Layout(mbs, tp, pp, sp, policy, attention, dp, m))
    return layouts, skipped


def explain_empty(grid: LayoutGrid, skipped: list[tuple[str, str]]) -> str:
    """One line saying why no layout of the grid is possible."""
    kinds = Counter()
    for _, reason in skipped:
        if "GPUs not divisible" in reason:
            kinds[f"{grid.gpus} GPUs are not divisible by PP*TP for any PP in "
                  f"{list(grid.pps)}, TP in {list(grid.tps)}"] += 1
        elif "global batch" in reason:
            kinds[f"global batch {grid.global_batch} is not divisible by DP*micro-batch for any "
                  f"layout (micro-batches {list(grid.micro_batches)})"] += 1
        else:
            kinds[reason] += 1
    detail = "; ".join(k for k, _ in kinds.most_common(3)) or "the grid is empty"
    return f"no layout is possible for {grid.gpus} GPUs: {detail}"
