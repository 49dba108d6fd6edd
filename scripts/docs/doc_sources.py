"""Readers of the committed results files the docs quote (scripts/docs/doc_values.py):
each returns numbers; doc_values formats them as the prose prints them."""
from __future__ import annotations

import csv
import json
import re
from functools import lru_cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FIG = ROOT / "results/figures"
H200 = ROOT / "results/h200"
GiB = 2 ** 30


@lru_cache(maxsize=None)
def json_file(rel: str):
    return json.loads((ROOT / rel).read_text())


@lru_cache(maxsize=None)
def csv_file(rel: str) -> tuple[dict, ...]:
    with open(ROOT / rel, newline="") as f:
        return tuple(csv.DictReader(f))


def rows(rel: str, **match) -> list[dict]:
    """The CSV's rows whose columns equal `match` (values compared as text)."""
    return [r for r in csv_file(rel) if all(r[k] == str(v) for k, v in match.items())]


def row(rel: str, **match) -> dict:
    found = rows(rel, **match)
    if len(found) != 1:
        raise KeyError(f"{rel}: {len(found)} rows match {match}")
    return found[0]


def benchmarks(pattern: str) -> str:
    """The first group of `pattern` in BENCHMARKS.md (today's figures), or, when that
    has no match, in results/benchmarks_log.md (the dated measurement log behind it:
    command, machine and date of every measurement)."""
    for rel in ("BENCHMARKS.md", "results/benchmarks_log.md"):
        path = ROOT / rel
        m = re.search(pattern, path.read_text()) if path.exists() else None
        if m is not None:
            return m.group(1)
    raise KeyError(f"neither BENCHMARKS.md nor results/benchmarks_log.md has {pattern!r}")


# ---- the measured H200 profiles (planner input) ----

def profile(family: str) -> dict:
    return json_file(f"results/h200/profile_{family}-13b.json")


def unit(family: str, kind: str) -> dict:
    return profile(family)["units"][kind]


def layer_fwd(family: str) -> float:
    """One transformer layer's forward (attention + MLP unit), seconds."""
    return unit(family, "attn")["fwd_time"] + unit(family, "mlp")["fwd_time"]


def layer_kept(family: str, recompute: tuple[str, ...] = ()) -> float:
    """Bytes one layer keeps per micro-batch when `recompute` ops are recomputed."""
    return sum(u["input_bytes"] + sum(o["act_bytes"] for name, o in u["ops"].items() if name not in recompute)
               for u in (unit(family, "attn"), unit(family, "mlp")))


@lru_cache(maxsize=None)
def profile_session() -> str:
    """The profile session folder (results/h200/profile_vN) whose profile the
    committed results/h200/profile_llama2-13b.json is a copy of."""
    committed = (H200 / "profile_llama2-13b.json").read_bytes()
    for d in sorted(H200.glob("profile_v*")):
        if (d / "profile_llama2-13b.json").exists() and (d / "profile_llama2-13b.json").read_bytes() == committed:
            return str(d.relative_to(ROOT))
    raise KeyError("no results/h200/profile_v* holds the committed profile")


# ---- the figure CSVs ----

def fig12(model: str, gbs: int, system: str, limit: str = "80", where: str = "results/figures") -> dict:
    return row(f"{where}/fig12_throughput.csv", model=model, global_batch=gbs, system=system,
               memory_limit_gib=limit)


def share(r: dict, base: str = "dapple_plus") -> float:
    """The share of the ceiling's gain Obscura reaches: (speedup - 1) / (ceiling - 1)."""
    sp, ceil = float(r[f"speedup_vs_{base}"]), float(r[f"ceiling_vs_{base}"])
    return (sp - 1) / (ceil - 1)


def fig12_obscura(family: str, size: str, limit: str = "80", where: str = "results/figures") -> list[dict]:
    return sorted(rows(f"{where}/fig12_throughput.csv", model=f"{family}-{size}", system="obscura",
                       memory_limit_gib=limit), key=lambda r: int(r["global_batch"]))


def fig13(model: str, system: str) -> list[dict]:
    return sorted(rows("results/figures/fig13_memory.csv", model=model, system=system), key=lambda r: int(r["stage"]))


def fig14(model: str, system: str) -> list[dict]:
    return sorted(rows("results/figures/fig14_stage_time.csv", model=model, system=system),
                  key=lambda r: int(r["stage"]))


def fig16(model: str, step: str, where: str = "results/figures") -> dict[int, dict]:
    return {int(r["global_batch"]): r for r in rows(f"{where}/fig16_ablation.csv", model=model, step=step)}


def zoo(model: str, gbs: int, system: str) -> dict:
    return row("results/figures/fig_zoo.csv", model=model, global_batch=gbs, system=system)


def stage_mfu(attention: str, policy: str) -> dict:
    return next(r for r in json_file("results/h200/stage_mfu.json")["rows"]
                if r["attention"] == attention and r["policy"] == policy)


# ---- the layout sweeps (scripts/layouts/layout_sweeps.py) ----

def sweep(model: str, seq_k: int, costs: str) -> list[dict]:
    """The fitting rows of one sweep, best MFU first (the CSV's order)."""
    return [r for r in csv_file(f"results/sweeps/{model}_{seq_k}k_{costs}.csv") if r["fits"] == "True"]


def sweep_best(model: str, seq_k: int, costs: str, **match) -> dict:
    """The best fitting row with the given columns (e.g. micro_batch=1, attention="xla")."""
    return next(r for r in sweep(model, seq_k, costs) if all(r[k] == str(v) for k, v in match.items()))


# ---- formatting ----

def span(values, fmt: str = "{:.0f}", unit: str = "") -> str:
    """'3-8%' (the smallest and largest as formatted; one figure when they agree)."""
    lo, hi = fmt.format(min(values)), fmt.format(max(values))
    return (lo if lo == hi else f"{lo}-{hi}") + unit


def stage_span(stages) -> str:
    """'0-2' for consecutive stages, '0, 2' otherwise."""
    s = sorted(int(x) for x in stages)
    if s and s == list(range(s[0], s[-1] + 1)):
        return str(s[0]) if len(s) == 1 else f"{s[0]}-{s[-1]}"
    return ", ".join(map(str, s))


def gbs_list(batches) -> str:
    """'GBS 16 and 32' / 'GBS 16, 32 and 64' / 'every GBS' (when `batches` is all of them)."""
    b = sorted(batches)
    return f"GBS {b[0]}" if len(b) == 1 else "GBS " + ", ".join(map(str, b[:-1])) + f" and {b[-1]}"
