"""Measured per-layer costs (format "obscura-sweep-layers/1", written by
scripts/layouts/sweep_layer_bench.py on the GPU) and how the sweep uses them.

One entry = one transformer layer (attention unit + MLP unit, built with
models.build_stage) of a layer shape at (seq_len, micro_batch, attention, policy):

    {"layer": {"family", "hidden", "num_heads", "num_kv_heads", "ffn_hidden",
               "compute_bytes"},
     "model": "llama2-13b", "seq_len": 2048, "micro_batch": 1, "attention": "cudnn",
     "policy": "none", "status": "measured" | "oom" | "skipped" | "failed",
     "fwd_time": s, "bwd_time": s (fwd+bwd minus fwd, recompute included),
     "residual_bytes": kept per micro-batch, "temp_bytes": XLA temp of fwd+bwd | null,
     "note": "..."}

Derivation (the bench prunes its grid to fit the GPU time; the rules live here so
the file stays raw). All derived entries are labelled "derived"; what no rule
reaches falls back to the analytic model for that layout.
  B. micro-batch scaling from the other attention kernel: a point (att, b, P) not
     measured, with (att, 1, P), (other, b, P) and (other, 1, P) measured:
        t(att, b, P) = t(att, 1, P) * t(other, b, P) / t(other, 1, P)   (fwd and bwd)
        residual = b * residual(att, 1, P)          (activations are linear in b)
  A. a policy's recompute overhead by analogy: P missing at (att, b) but none and
     full there (measured or by B), and a reference (att, 1), (other, b) or
     (other, 1) with none, full and P measured:
        bwd(P) = bwd(none) + (ref bwd(P) - ref bwd(none))
                             * (bwd(full) - bwd(none)) / (ref bwd(full) - ref bwd(none))
        fwd(P) = fwd(none)                (the forward does not depend on the policy)
        residual(P) = ref residual(P) * residual(none) / ref residual(none)
Use: the layer's measured seconds and bytes calibrate the analytic unit costs at
the same (seq, micro-batch, attention, policy) field by field (forward, backward,
recompute, kept bytes); the analytic model then supplies the attention/
MLP split, TP scaling and TP collectives. Embedding and head stay analytic.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from models.config import ModelConfig
from planner.errors import PlanError
from planner.layouts.unit_costs import UnitModel
from schedules.formats.jsonio import read_json

FORMAT = "obscura-sweep-layers/1"
# Revision of scripts/layouts/sweep_layer_bench.py's method. Files without it (revision 1)
# timed a forward+backward program that did not return the layer output, so XLA
# dropped the forward work only the output needed: recompute looked free (`full`
# +4%, `mlp` faster than `none`). Such files are ignored.
BENCH_REVISION = 2
STATUSES = ("measured", "oom", "skipped", "failed")
LAYER_KEYS = ("family", "hidden", "num_heads", "num_kv_heads", "ffn_hidden", "compute_bytes")
DEFAULT_PATH = Path("results") / "h200" / "sweep_layers.json"


def layer_key(cfg: ModelConfig) -> dict:
    """What identifies one transformer layer's cost in a measurement file."""
    return {"family": cfg.family, "hidden": cfg.hidden, "num_heads": cfg.num_heads,
            "num_kv_heads": cfg.num_kv_heads, "ffn_hidden": cfg.ffn_hidden,
            "compute_bytes": cfg.compute_bytes}


@dataclass(frozen=True)
class LayerMeasurement:
    fwd: float
    bwd: float                 # backward with the policy's recompute
    bwd_none: float            # backward of the same shape with nothing recomputed
    residual_bytes: float
    temp_bytes: float | None
    source: str                # "measured" | "derived"


def _num(where: str, v, allow_none: bool = False):
    if v is None and allow_none:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
        raise PlanError(f"{where} must be a number >= 0, got {v!r}")
    return float(v)


class MeasuredLayers:
    def __init__(self, data: dict, path: str = "<data>"):
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            got = data.get("format") if isinstance(data, dict) else type(data).__name__
            raise PlanError(f"measured layer file {path}: format must be {FORMAT!r}, got {got!r}")
        entries = data.get("entries")
        if not isinstance(entries, list):
            raise PlanError(f"measured layer file {path}: 'entries' must be a list")
        self.path = str(path)
        self.device = str(data.get("device", "unknown device"))
        revision = data.get("bench_revision", 1)
        self.stale = not isinstance(revision, int) or revision < BENCH_REVISION
        self.meta = {k: v for k, v in data.items() if k != "entries"}
        self._raw: dict[tuple, dict] = {}
        for i, e in enumerate(entries):
            where = f"measured layer file {path}: entry {i}"
            if not isinstance(e, dict):
                raise PlanError(f"{where} is not an object")
            layer = e.get("layer")
            if not isinstance(layer, dict) or any(k not in layer for k in LAYER_KEYS):
                raise PlanError(f"{where}: 'layer' needs {', '.join(LAYER_KEYS)}")
            status = e.get("status")
            if status not in STATUSES:
                raise PlanError(f"{where}: status must be one of {', '.join(STATUSES)}, got {status!r}")
            for k in ("seq_len", "micro_batch"):
                if isinstance(e.get(k), bool) or not isinstance(e.get(k), int) or e[k] < 1:
                    raise PlanError(f"{where}: {k} must be a positive integer, got {e.get(k)!r}")
            for k in ("attention", "policy"):
                if not isinstance(e.get(k), str):
                    raise PlanError(f"{where}: {k} must be a string, got {e.get(k)!r}")
            if status == "measured":
                for k in ("fwd_time", "bwd_time", "residual_bytes"):
                    _num(f"{where}: {k}", e.get(k))
                _num(f"{where}: temp_bytes", e.get("temp_bytes"), allow_none=True)
            key = (self._layer_key(layer), e["seq_len"], e["micro_batch"], e["attention"], e["policy"])
            self._raw[key] = e

    @staticmethod
    def _layer_key(layer: dict) -> tuple:
        return tuple(layer[k] for k in LAYER_KEYS)

    def status(self, layer: dict, seq: int, mbs: int, attention: str, policy: str) -> str | None:
        e = self._raw.get((self._layer_key(layer), seq, mbs, attention, policy))
        return None if e is None else e["status"]

    def _measured(self, lk, seq, mbs, att, pol) -> dict | None:
        e = self._raw.get((lk, seq, mbs, att, pol))
        return e if e is not None and e["status"] == "measured" else None

    def _point(self, lk, seq, mbs, att, pol) -> dict | None:
        """A measured point, or one scaled by rule B (micro-batch from the other kernel)."""
        e = self._measured(lk, seq, mbs, att, pol)
        if e is not None:
            return {**e, "source": "measured"}
        if mbs == 1:
            return None
        one = self._measured(lk, seq, 1, att, pol)
        for other in {a for (k, s, _, a, _) in self._raw if k == lk and s == seq and a != att}:
            ob, o1 = self._measured(lk, seq, mbs, other, pol), self._measured(lk, seq, 1, other, pol)
            if one is not None and ob is not None and o1 is not None \
                    and o1["fwd_time"] > 0 and o1["bwd_time"] > 0:
                return {"fwd_time": one["fwd_time"] * ob["fwd_time"] / o1["fwd_time"],
                        "bwd_time": one["bwd_time"] * ob["bwd_time"] / o1["bwd_time"],
                        "residual_bytes": one["residual_bytes"] * mbs, "temp_bytes": None,
                        "source": "derived"}
        return None

    def lookup(self, layer: dict, seq: int, mbs: int, attention: str, policy: str
               ) -> LayerMeasurement | None:
        """The measured (or derived) layer cost, or None when no rule reaches it."""
        lk = self._layer_key(layer)
        none = self._point(lk, seq, mbs, attention, "none")
        if none is None:
            return None
        point = self._point(lk, seq, mbs, attention, policy)
        if point is not None:
            both = "measured" if point["source"] == none["source"] == "measured" else "derived"
            return LayerMeasurement(point["fwd_time"], point["bwd_time"], none["bwd_time"],
                                    point["residual_bytes"], point.get("temp_bytes"), both)
        full = self._point(lk, seq, mbs, attention, "full")
        if full is None:
            return None
        others = sorted({a for (k, s, _, a, _) in self._raw if k == lk and s == seq and a != attention})
        refs = [(attention, 1)] + [(o, mbs) for o in others] + [(o, 1) for o in others]
        for ref_att, ref_mbs in refs:
            if (ref_att, ref_mbs) == (attention, mbs):
                continue
            r = [self._measured(lk, seq, ref_mbs, ref_att, q) for q in ("none", "full", policy)]
            if None in r or r[1]["bwd_time"] - r[0]["bwd_time"] <= 0 or r[0]["residual_bytes"] <= 0:
                continue
            overhead = ((r[2]["bwd_time"] - r[0]["bwd_time"]) * (full["bwd_time"] - none["bwd_time"])
                        / (r[1]["bwd_time"] - r[0]["bwd_time"]))
            residual = r[2]["residual_bytes"] * none["residual_bytes"] / r[0]["residual_bytes"]
            return LayerMeasurement(none["fwd_time"], none["bwd_time"] + max(0.0, overhead),
                                    none["bwd_time"], residual, None, "derived")
        return None


def load_measured(path: str | Path) -> MeasuredLayers:
    return MeasuredLayers(read_json(path, "measured layer file"), str(path))


def default_measured_path() -> Path | None:
    """results/h200/sweep_layers.json under the working directory or the checkout."""
    here = Path(__file__).resolve().parents[2] / DEFAULT_PATH
    for p in (Path.cwd() / DEFAULT_PATH, here):
        if p.is_file():
            return p
    return None


def calibrate(units: dict[str, UnitModel], analytic_tp1: dict[str, UnitModel], m: LayerMeasurement,
              recompute: frozenset[str]) -> tuple[dict[str, UnitModel], dict[str, float]]:
    """Scale the analytic attention and MLP unit costs (at the layout's TP/SP) so that
    the single-GPU layer under the recompute set `recompute` matches the measurement
    field by field. TP collective time is kept out of the scaling. Returns (units,
    the factors used)."""
    a, b = analytic_tp1["attn"].profile(), analytic_tp1["mlp"].profile()

    def factor(measured: float, modelled: float) -> float:
        return measured / modelled if modelled > 0 else 1.0

    f = {"fwd": factor(m.fwd, a.fwd_time + b.fwd_time),
         "bwd": factor(m.bwd_none, a.bwd_time + b.bwd_time),
         "recompute": factor(max(0.0, m.bwd - m.bwd_none),
                             a.recompute_time(recompute) + b.recompute_time(recompute)),
         "kept": factor(m.residual_bytes, a.kept_bytes(recompute) + b.kept_bytes(recompute))}
    # temp_bytes is not used: it is the XLA temp of ONE fused fwd+bwd program, where XLA
    # may fuse saved activations away (13B 2k: 229 MiB temp < 376 MiB of residuals); the
    # pipeline engine's split programs materialise every residual, so the analytic
    # transient stays.
    out = dict(units)
    for k in ("attn", "mlp"):
        out[k] = units[k].scaled(fwd=f["fwd"], bwd=f["bwd"], recompute=f["recompute"], kept=f["kept"])
    return out, f
