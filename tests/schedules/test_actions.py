"""The per-kind table (schedules/actions.py) is the one place a kind's meaning lives:
the source packages hold no second definition of the effective kind (a B of a split
backward acts as I) and no second lane table (kinds mapped to lanes, or the compute
kinds listed again). The check reads the sources' syntax trees; its self-test plants
each kind of duplicate in a scratch package."""
import ast
import textwrap
from pathlib import Path

from schedules.actions import COMPUTE, COMPUTE_KINDS, HOST_IN, HOST_OUT, KINDS, LANE_OF, effective_kind
from schedules.ir import Action, Kind, Schedule, StageSpec

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("models", "schedules", "planner", "obscura_jax", "experiments")
TABLE = Path("schedules/actions.py")
LANE_NAMES = {COMPUTE, HOST_OUT, HOST_IN}
KIND_NAMES = {k.value for k in Kind}
SPLIT_WORDS = ("split", "has_w")


def _kind(node) -> str | None:
    """The kind a node names: `Kind.B`, the table's `_B`, or (strings=True) "B"."""
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "Kind":
        return node.attr
    if isinstance(node, ast.Name) and node.id.startswith("_") and node.id[1:] in KIND_NAMES:
        return node.id[1:]
    return None


def _kinds_in(node, strings: bool = False) -> set[str]:
    out = {_kind(n) for n in ast.walk(node)} - {None}
    if strings:
        out |= {n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and n.value in KIND_NAMES}
    return out


def _mentions_split(node) -> bool:
    names = [n.id for n in ast.walk(node) if isinstance(n, ast.Name)]
    names += [n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)]
    return any(w in name.lower() for name in names for w in SPLIT_WORDS)


def _calls(node, name: str) -> bool:
    return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == name
               for n in ast.walk(node))


def _literal_kinds(node) -> set[str] | None:
    """The kinds a tuple/list/set literal lists, when it lists kinds only."""
    if not isinstance(node, (ast.Tuple, ast.List, ast.Set)) or not node.elts:
        return None
    kinds = [_kind(e) or (e.value if isinstance(e, ast.Constant) and e.value in KIND_NAMES else None)
             for e in node.elts]
    return set(kinds) if None not in kinds else None


def _lane_value(node) -> bool:
    return (isinstance(node, ast.Constant) and node.value in LANE_NAMES) or \
        (isinstance(node, ast.Name) and node.id in ("COMPUTE", "HOST_OUT", "HOST_IN"))


def duplicates(tree: ast.Module, where: str) -> list[str]:
    """"where:line: what" for each second definition in one module."""
    compute = {k.value for k in COMPUTE_KINDS}
    found = []
    for node in ast.walk(tree):
        line = f"{where}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and "effective_kind" in node.name \
                and not _calls(node, "effective_kind"):
            found.append(f"{line}: {node.name} defines the effective kind again (call schedules.actions')")
        elif isinstance(node, ast.IfExp) and _kind(node.body) == "I" and "B" in _kinds_in(node.test):
            found.append(f"{line}: rewrites B as I (schedules.actions.effective_kind)")
        elif isinstance(node, ast.BoolOp) and {"B", "I"} <= _kinds_in(node) and _mentions_split(node):
            found.append(f"{line}: B with a W treated as I by hand (schedules.actions.effective_kind)")
        elif _literal_kinds(node) == compute:
            found.append(f"{line}: lists the compute kinds again (schedules.actions.COMPUTE_KINDS)")
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] \
            if isinstance(node, ast.AnnAssign) and node.value is not None else []
        names = [t.id for t in targets if isinstance(t, ast.Name)]
        value = getattr(node, "value", None)
        if isinstance(value, ast.Dict) and value.keys and all(k is not None and _kind(k) for k in value.keys) \
                and (any("LANE" in n.upper() for n in names) or all(_lane_value(v) for v in value.values)):
            found.append(f"{where}:{node.lineno}: {', '.join(names)} maps kinds to lanes again "
                         "(schedules.actions.KINDS[kind].lane)")
        elif any("COMPUTE_KINDS" in n for n in names) and _literal_kinds(value) is not None:
            found.append(f"{where}:{node.lineno}: {', '.join(names)} lists compute kinds again")
    return found


def scan(root: Path, packages=PACKAGES) -> list[str]:
    out = []
    for pkg in packages:
        for path in sorted((root / pkg).rglob("*.py")):
            rel = path.relative_to(root)
            if rel != TABLE:
                out += duplicates(ast.parse(path.read_text(encoding="utf-8")), str(rel))
    return out


def test_one_effective_kind_and_one_lane_table():
    assert scan(ROOT) == []


def test_the_check_catches_planted_duplicates(tmp_path):
    pkg = tmp_path / "schedules"
    pkg.mkdir()
    (pkg / "planted.py").write_text(textwrap.dedent("""
        from schedules.ir import Kind
        LANES = {Kind.SO: (1, "swap out"), Kind.SI: (2, "swap in")}
        WHERE = {Kind.F: "compute", Kind.SO: "host_out"}
        COMPUTE_KINDS = (Kind.F, Kind.B)
        def effective_kind(kind, split):
            return kind
        def kind_of(a, split):
            return Kind.I if a.kind is Kind.B and a.key in split else a.kind
        def runs_input_half(a, has_w):
            return a.kind is Kind.I or (a.kind is Kind.B and a.key in has_w)
        def busy(o):
            return o.kind in ("F", "B", "I", "W")
    """))
    (pkg / "fine.py").write_text(textwrap.dedent("""
        from schedules.actions import COMPUTE_KINDS, effective_kind
        from schedules.ir import Kind
        QUEUE = {Kind.F: "F", Kind.B: "BI", Kind.I: "BI", Kind.W: "W"}
        class S:
            def effective_kind(self, a):
                return effective_kind(a.kind, a.key in self.split)
        def backward_first(k, pos):
            return k == Kind.B and (Kind.I, 0) in pos
    """))
    hits = scan(tmp_path, ("schedules",))
    assert all(h.startswith("schedules/planted.py:") for h in hits)
    assert sorted(int(h.split(":")[1]) for h in hits) == [3, 4, 5, 6, 9, 11, 13]


def test_the_table_gives_lanes_and_the_effective_kind():
    assert COMPUTE_KINDS == (Kind.F, Kind.B, Kind.I, Kind.W)
    assert LANE_OF == {k: r.lane for k, r in KINDS.items()}
    assert (LANE_OF[Kind.SO], LANE_OF[Kind.SI]) == (HOST_OUT, HOST_IN)
    assert effective_kind(Kind.B, True) is Kind.I and effective_kind(Kind.B, False) is Kind.B
    assert all(effective_kind(k, True) is k for k in Kind if k is not Kind.B)
    sched = Schedule("s", 1, 2, (StageSpec((Action(0, Kind.F, 0), Action(0, Kind.F, 1), Action(0, Kind.B, 0),
                                            Action(0, Kind.B, 1), Action(0, Kind.W, 1))),))
    assert [sched.effective_kind(a) for a in sched.stages[0].actions] == [Kind.F, Kind.F, Kind.B, Kind.I, Kind.W]
