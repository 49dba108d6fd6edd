"""Model families: the one place that says which units and which op names a model has.

A family is registered once, with
  units    its four unit module classes, by kind: embed, attn, mlp, head (Flax NNX
           modules built as `cls(cfg, rngs)`; a class or a "module:attribute" string
           that is imported on first use, so registering needs no JAX);
  ops      its op vocabulary by unit kind, each kind's ops in forward order (the
           names its modules tag with `checkpoint_name`); kinds own disjoint ops;
  presets  named recompute sets ("none" and "full" are always there: nothing /
           every op), e.g. {"cmb": [...], "selective": ["attn_core"]};
  check    optional: a function(cfg) -> None that raises ModelConfigError for a
           config the family cannot build (e.g. an odd head dim under RoPE);
  tensor_parallel  optional: how its parameters shard over a tensor-parallel axis,
           by unit kind: {kind: {"module/param": role}} with role "column" (the
           output dim: q, gate, up, the vocab of the head; a bias too), "kv_column"
           (k and v under grouped-query attention: by columns when the KV heads
           divide over the axis, else replicated, as Megatron does) or "row" (the
           input dim: attention out, MLP down); every other parameter
           is replicated (norms, row biases, embeddings). Without it a family
           trains only at tensor-parallel 1 (models.tensor_parallel says why).
Policies, model-info, the profiler, the planner and the engine ask this registry
(ops_for, unit_ops, preset_ops, ...) instead of holding op lists of their own;
Llama-2 and GPT-3 are two registrations (models/ops.py). Configs are registered by
name in models.config (register_config). `load_model_module` imports a user's
module (a dotted name or a .py path) that registers its own models: the CLI's
`--model-module`.

A model is 2L+2 units: embed, attn_0, mlp_0, ..., attn_{L-1}, mlp_{L-1}, head; or,
for a parallel-block family (units embed, block, head: GPT-NeoX / Falcon, whose
block sums attention and MLP of the same input), L+2: embed, block_0, ..., head.
The embed module takes int tokens [B,T] and returns [B,T,D]; attn and mlp map
[B,T,D] -> [B,T,D]; the head is called as head(x, targets, tied_table) -> scalar
mean loss and has head.logits(x, tied_table) -> [B,T,V] (tied_table is None unless
cfg.tie_embeddings, in which case it is params["embed"]["tokens"]["embedding"]).
JAX-free: nothing here imports JAX.
"""
from __future__ import annotations

import importlib
import importlib.util
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Sequence

from models.errors import ModelConfigError

UNIT_KINDS: tuple[str, ...] = ("embed", "attn", "mlp", "head")
# A parallel block (GPT-NeoX, Falcon): attention and MLP read the same input and
# their outputs are summed, y = x + attn(x) + mlp(x); one unit per layer.
BLOCK_KINDS: tuple[str, ...] = ("embed", "block", "head")
LAYOUTS = (UNIT_KINDS, BLOCK_KINDS)
ALWAYS_PRESETS: tuple[str, ...] = ("none", "full")
LAYER = "layer"   # policy name: one checkpoint per transformer layer (models.policy); reserved


@dataclass(frozen=True)
class ModelFamily:
    name: str
    units: tuple[tuple[str, object], ...]          # (kind, class or "module:attr"), UNIT_KINDS order
    kind_ops: tuple[tuple[str, tuple[str, ...]], ...]   # (kind, its ops in forward order)
    presets: tuple[tuple[str, frozenset[str]], ...]     # (name, op set), "none" and "full" first
    check: Callable | None = field(default=None, compare=False)
    tensor_layout: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = ()   # (kind, ((path, role),))

    @property
    def ops(self) -> tuple[str, ...]:
        """Every op name, in forward order (embed, attn, mlp, head ops)."""
        return tuple(o for _, ops in self.kind_ops for o in ops)

    @property
    def preset_names(self) -> tuple[str, ...]:
        return tuple(n for n, _ in self.presets)

    @property
    def kinds(self) -> tuple[str, ...]:
        """Its unit kinds: UNIT_KINDS, or BLOCK_KINDS for a parallel-block family."""
        return tuple(k for k, _ in self.units)

    @property
    def layer_kinds(self) -> tuple[str, ...]:
        """The unit kinds of one layer, in order: ("attn", "mlp") or ("block",)."""
        return self.kinds[1:-1]

    def unit_ops(self, kind: str) -> tuple[str, ...]:
        if kind not in self.kinds:
            raise ModelConfigError(f"unknown unit kind {kind!r} for {self.name}; valid: {', '.join(self.kinds)}")
        return dict(self.kind_ops)[kind]

    def op_kind(self, op: str) -> str:
        for kind, ops in self.kind_ops:
            if op in ops:
                return kind
        raise ModelConfigError(f"unknown op {op!r} for {self.name}; valid ops: {', '.join(self.ops)}")

    def preset(self, name: str) -> frozenset[str]:
        presets = dict(self.presets)
        if name not in presets:
            raise ModelConfigError(f"unknown policy preset {name!r} for {self.name}; valid presets: "
                                   f"{', '.join(self.preset_names)}")
        return presets[name]

    def unit_class(self, kind: str):
        """The module class of a unit kind (imported now if registered by name)."""
        ref = dict(self.units)[kind]
        if isinstance(ref, str):
            module, _, attr = ref.partition(":")
            ref = getattr(importlib.import_module(module), attr)
        return ref


_FAMILIES: dict[str, ModelFamily] = {}


def register_family(name: str, *, units: Mapping[str, object], ops: Mapping[str, Sequence[str]],
                    presets: Mapping[str, Sequence[str]] | None = None, check: Callable | None = None,
                    tensor_parallel: Mapping[str, Mapping[str, str]] | None = None,
                    replace: bool = False) -> ModelFamily:
    """Register a model family (see the module docstring); returns it. Re-registering a
    name with another definition is an error unless `replace`; the same definition
    again (a module imported twice) replaces it quietly."""
    if not isinstance(name, str) or not name:
        raise ModelConfigError("a model family needs a non-empty name")
    layout = next((kinds for kinds in LAYOUTS if isinstance(units, Mapping) and set(units) == set(kinds)),
                  UNIT_KINDS)
    for what, given in (("units", units), ("ops", ops)):
        if not isinstance(given, Mapping) or set(given) != set(layout):
            have = sorted(given) if isinstance(given, Mapping) else type(given).__name__
            raise ModelConfigError(f"family {name!r}: {what} must map each unit kind "
                                   f"{', '.join(UNIT_KINDS)} (or, for a parallel block, "
                                   f"{', '.join(BLOCK_KINDS)}) (got {have})")
    kind_ops, seen = [], set()
    for kind in layout:
        names = (ops[kind],) if isinstance(ops[kind], str) else tuple(ops[kind])
        bad = [o for o in names if not isinstance(o, str) or not o or o in ("full", LAYER)]
        if bad:
            raise ModelConfigError(f"family {name!r}: op names must be non-empty strings other than "
                                   f"'full' and 'layer', got {bad[0]!r} in {kind}")
        twice = sorted(seen & set(names)) or sorted({o for o in names if names.count(o) > 1})
        if twice:
            raise ModelConfigError(f"family {name!r}: op {twice[0]!r} is listed twice (unit kinds "
                                   "own disjoint ops)")
        seen |= set(names)
        kind_ops.append((kind, names))
    vocab = tuple(o for _, names in kind_ops for o in names)
    preset_list = [("none", frozenset()), ("full", frozenset(vocab))]
    for pname, pops in (presets or {}).items():
        if pname in ALWAYS_PRESETS or pname in vocab or pname == LAYER:
            raise ModelConfigError(f"family {name!r}: preset name {pname!r} is taken (by "
                                   f"{'a built-in preset' if pname in ALWAYS_PRESETS + (LAYER,) else 'an op'})")
        pset = frozenset((pops,) if isinstance(pops, str) else pops)
        unknown = sorted(pset - set(vocab))
        if unknown:
            raise ModelConfigError(f"family {name!r}: preset {pname!r} names unknown op(s) "
                                   f"{', '.join(unknown)}")
        preset_list.append((pname, pset))
    for kind in layout:
        ref = units[kind]
        if not (isinstance(ref, type) or (isinstance(ref, str) and ":" in ref)):
            raise ModelConfigError(f"family {name!r}: units[{kind!r}] must be a module class or a "
                                   f"'module:Class' string, got {ref!r}")
    family = ModelFamily(name, tuple((k, units[k]) for k in layout), tuple(kind_ops),
                         tuple(preset_list), check, _tensor_layout(name, tensor_parallel, layout))
    old = _FAMILIES.get(name)
    if old is not None and not replace and _definition(old) != _definition(family):
        raise ModelConfigError(f"model family {name!r} is already registered with other units, ops or "
                               "presets (pass replace=True to redefine it)")
    _FAMILIES[name] = family
    return family


TENSOR_ROLES = ("column", "row", "kv_column")


def _tensor_layout(name: str, given, kinds: tuple[str, ...]) -> tuple:
    if given is None:
        return ()
    if not isinstance(given, Mapping) or not set(given) <= set(kinds):
        raise ModelConfigError(f"family {name!r}: tensor_parallel must map unit kinds "
                               f"({', '.join(kinds)}) to {{'module/param': role}}")
    layout = []
    for kind in kinds:
        rules = given.get(kind, {})
        bad = [(k, r) for k, r in rules.items() if not isinstance(k, str) or r not in TENSOR_ROLES]
        if bad:
            raise ModelConfigError(f"family {name!r}: tensor_parallel[{kind!r}][{bad[0][0]!r}] is "
                                   f"{bad[0][1]!r}; roles are {', '.join(TENSOR_ROLES)}")
        layout.append((kind, tuple(sorted(rules.items()))))
    return tuple(layout)


def _definition(family: ModelFamily) -> tuple:
    """What makes two registrations the same family: a module imported twice (as a
    script and by name) registers new class objects of the same names."""
    names = tuple((k, ref if isinstance(ref, str) else ref.__qualname__) for k, ref in family.units)
    return names, family.kind_ops, family.presets, family.tensor_layout


def family_names() -> tuple[str, ...]:
    return tuple(_FAMILIES)


def get_family(name: str) -> ModelFamily:
    if name not in _FAMILIES:
        raise ModelConfigError(f"unknown model family {name!r}; registered: {', '.join(_FAMILIES)} "
                               "(a family of your own is registered by its module: --model-module)")
    return _FAMILIES[name]


def ops_for(family: str) -> tuple[str, ...]:
    """All op names of a model family, in forward order."""
    return get_family(family).ops


def unit_ops(family: str, kind: str) -> tuple[str, ...]:
    """The ops a unit of `kind` ("embed" | "attn" | "mlp" | "head") contains."""
    return get_family(family).unit_ops(kind)


def op_unit_kind(family: str, op: str) -> str:
    """Which unit kind an op name belongs to in `family`."""
    return get_family(family).op_kind(op)


def preset_names(family: str) -> tuple[str, ...]:
    """The family's policy presets: none, full, then its own."""
    return get_family(family).preset_names


def preset_ops(name: str, family: str) -> frozenset[str]:
    """The recompute set a preset stands for in a family."""
    return get_family(family).preset(name)


def all_ops() -> tuple[str, ...]:
    """Every op name of every registered family, in registration order (a policy
    with no family is checked against this)."""
    seen: dict[str, None] = {}
    for fam in _FAMILIES.values():
        seen.update(dict.fromkeys(fam.ops))
    return tuple(seen)


def format_units(unit_range) -> str:
    """A stage's unit range as every table prints it: half-open, "[a, b)"."""
    start, end = unit_range
    return f"[{int(start)}, {int(end)})"


def load_model_module(spec: str):
    """Import a module that registers models: a dotted module name (importable from
    the current directory too) or a path to a .py file. A module that cannot be
    found or fails while importing is one ModelConfigError naming it."""
    if not isinstance(spec, str) or not spec.strip():
        raise ModelConfigError("--model-module needs a module name or a .py path")
    spec = spec.strip()
    path = Path(spec)
    as_file = spec.endswith(".py") or path.is_file()
    if as_file and not path.is_file():
        raise ModelConfigError(f"model module {spec}: no such file")
    try:
        return _import_file(path) if as_file else _import_name(spec)
    except ModuleNotFoundError as e:
        raise ModelConfigError(f"model module {spec}: cannot import it ({e})") from None
    except SyntaxError as e:
        raise ModelConfigError(f"model module {spec}: syntax error at line {e.lineno}: {e.msg}") from None
    except SystemExit as e:   # a module that registers models must not end the program
        raise ModelConfigError(f"model module {spec} called sys.exit({e.code!r}) while importing") from None
    except Exception as e:  # the user's code failed while registering: name the module and the error
        raise ModelConfigError(f"model module {spec} failed while importing: "
                               f"{type(e).__name__}: {e}") from None


def _import_file(path: Path):
    name = "obscura_user_" + "".join(c if c.isalnum() else "_" for c in str(path.resolve()))
    if name in sys.modules:   # imported before: its registrations are in place
        return sys.modules[name]
    loader = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(loader)
    sys.modules[name] = module
    try:
        loader.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def _import_name(name: str):
    if str(Path.cwd()) not in sys.path and "" not in sys.path:
        sys.path.insert(0, str(Path.cwd()))   # `python -m`-like: modules beside the user
    return importlib.import_module(name)
