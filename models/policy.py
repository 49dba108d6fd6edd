"""Recompute policies as data, lowered to `jax.checkpoint` policies.

Semantics (kept identical everywhere: engine, profiler, planner):
- `none` saves EVERY named op (save_only_these_names(all ops)): unnamed cheap
  intermediates (norm statistics, softmax internals, dtype casts of weights) are
  recomputed, so a unit keeps exactly its input plus the named ops its backward
  needs, which is the profile formula `input_bytes + sum(act_bytes of ops kept)`.
- recompute set R: save only (all - R).
- offload set O: save (all - R - O) on device, offload O to pinned host memory
  (save_and_offload_only_these_names, device -> pinned_host).
- `full` (R = all ops, nothing offloaded): nothing_saveable, per unit.
- `layer` (R = all ops, `layer=True`): ONE checkpoint over the attention and MLP
  units of a transformer layer (models.stage), saving nothing but the layer's
  input: the paper's DAPPLE+ (DeepSpeed) and MaxText's `remat_policy: full`. A
  unit without its layer partner in the stage (embed, head, a split layer) runs
  as under `full`.
A policy never changes the math: same loss, same gradients.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass

from models.config import ModelConfigError
from models.registry import LAYER, all_ops, ops_for, preset_names, preset_ops


@dataclass(frozen=True)
class RecomputePolicy:
    recompute: frozenset[str] = frozenset()
    offload: frozenset[str] = frozenset()
    name: str = "none"
    family: str | None = None       # None: the union vocabulary of all registered families
    layer: bool = False             # one checkpoint per transformer layer (attn + mlp), saving its input

    def __post_init__(self):
        for field in ("recompute", "offload"):
            value = getattr(self, field)
            if isinstance(value, str) or not all(isinstance(o, str) for o in value):
                raise ModelConfigError(f"policy {field} must be a set of op names, got {value!r}")
            object.__setattr__(self, field, frozenset(value))
        vocab = self.vocabulary
        unknown = sorted((self.recompute | self.offload) - set(vocab))
        if unknown:
            raise ModelConfigError(
                f"unknown op(s) {', '.join(unknown)}; valid ops: {', '.join(vocab)}")
        both = sorted(self.recompute & self.offload)
        if both:
            raise ModelConfigError(f"op(s) {', '.join(both)} cannot be both recomputed and offloaded")
        if not isinstance(self.name, str) or not self.name:
            raise ModelConfigError("policy needs a non-empty name")
        if self.layer and (self.offload or self.recompute != frozenset(vocab)):
            raise ModelConfigError("a layer-granular policy recomputes every op and offloads none")

    @property
    def vocabulary(self) -> tuple[str, ...]:
        return all_ops() if self.family is None else ops_for(self.family)

    @property
    def saved(self) -> frozenset[str]:
        """Ops kept on device."""
        return frozenset(self.vocabulary) - self.recompute - self.offload

    def to_jax(self):
        """The `jax.checkpoint` policy for this recompute/offload choice."""
        import jax  # lazy: resolving and validating a policy (RunConfig, the CLI) starts no JAX

        cp = jax.checkpoint_policies
        saved = sorted(self.saved)
        if self.offload:
            return cp.save_and_offload_only_these_names(
                names_which_can_be_saved=saved,
                names_which_can_be_offloaded=sorted(self.offload),
                offload_src="device", offload_dst="pinned_host")
        if not saved:
            return cp.nothing_saveable
        return cp.save_only_these_names(*saved)

    def to_json(self) -> dict:
        out = {"name": self.name, "recompute": sorted(self.recompute), "offload": sorted(self.offload)}
        return {**out, "layer": True} if self.layer else out


def _split_spec(spec) -> list[str]:
    if isinstance(spec, str):
        return [s.strip() for s in spec.split(",") if s.strip()]
    if isinstance(spec, Iterable):
        out = []
        for item in spec:
            if not isinstance(item, str):
                raise ModelConfigError(f"policy entries must be op or preset names, got {item!r}")
            out.extend(_split_spec(item))
        return out
    raise ModelConfigError(f"policy must be a preset name, op list or RecomputePolicy, got {spec!r}")


def offload_names(spec) -> list[str]:
    """An offload set as given (`--offload OPS`, RunConfig.offload, resolve_policy's
    `offload`): a comma list or an iterable of op and preset names, with no empty
    item (`mlp_gate,,mlp_up` or a trailing comma is a typo, not an empty set)."""
    items = spec.split(",") if isinstance(spec, str) else None
    if items is not None:
        if not spec.strip():
            raise ModelConfigError("offload names no op: give op or preset names separated by commas")
        if any(not t.strip() for t in items):
            raise ModelConfigError(f"offload {spec!r} has an empty item: give op or preset names separated "
                                   "by commas")
        return [t.strip() for t in items]
    if isinstance(spec, Iterable):
        return [name for item in spec for name in offload_names(_named(item))]
    raise ModelConfigError(f"offload must be op or preset names, got {spec!r}")


def _named(item):
    if not isinstance(item, str):
        raise ModelConfigError(f"offload entries must be op or preset names, got {item!r}")
    return item


def _expand(names: list[str], family: str, what: str) -> frozenset[str]:
    ops, presets = ops_for(family), preset_names(family)
    out: set[str] = set()
    for n in names:
        if n in presets:
            out |= preset_ops(n, family)
        elif n in ops:
            out.add(n)
        else:
            raise ModelConfigError(
                f"unknown {what} name {n!r} for {family}; valid presets: "
                f"{', '.join(presets)}; valid ops: {', '.join(ops)}")
    return frozenset(out)


def resolve_policy(spec, family: str, offload=()) -> RecomputePolicy:
    """A preset name, a comma-separated op list, an iterable of op/preset names
    (their union) or a RecomputePolicy -> RecomputePolicy for `family`. `offload`
    takes the same forms (an empty item is an error: offload_names) and is added to
    the policy's offload set; an op both recomputed and offloaded is an error."""
    ops = ops_for(family)  # validates the family
    extra_offload = _expand(offload_names(offload), family, "offload op")
    if not isinstance(spec, RecomputePolicy) and spec is not None and LAYER in _split_spec(spec):
        if _split_spec(spec) != [LAYER] or extra_offload:
            raise ModelConfigError(f"policy {LAYER!r} (one checkpoint per layer) stands alone: it cannot be "
                                   "combined with other ops, presets or offloading")
        return RecomputePolicy(recompute=frozenset(ops), name=LAYER, family=family, layer=True)
    if isinstance(spec, RecomputePolicy):
        if spec.family not in (None, family):
            raise ModelConfigError(f"policy {spec.name!r} is for {spec.family}, not {family}")
        foreign = sorted((spec.recompute | spec.offload) - set(ops))
        if foreign:
            raise ModelConfigError(f"policy {spec.name!r} names op(s) {', '.join(foreign)} "
                                   f"that {family} does not have")
        if not extra_offload - spec.offload:
            return dataclasses.replace(spec, family=family)
        if spec.layer:
            raise ModelConfigError(f"policy {LAYER!r} cannot be combined with offloading")
        recompute, offload_set, base = spec.recompute, spec.offload | extra_offload, spec.name
        base = base.split("+offload:")[0]
    else:
        names = _split_spec(spec) if spec is not None else []
        recompute, offload_set = _expand(names, family, "policy or op"), extra_offload
        base = _name_for(names, recompute, family)
    name = base
    if offload_set:
        name = f"{base}+offload:{','.join(o for o in ops if o in offload_set)}"
    return RecomputePolicy(recompute=recompute, offload=offload_set, name=name, family=family)


def _name_for(names: list[str], recompute: frozenset[str], family: str) -> str:
    presets = preset_names(family)
    if len(names) == 1 and names[0] in presets:
        return names[0]
    for preset in presets:                  # a set that equals a preset is named by it
        if recompute == preset_ops(preset, family):
            return preset
    return ",".join(o for o in ops_for(family) if o in recompute)
