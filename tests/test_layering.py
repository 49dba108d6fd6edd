"""The package layering (models <- schedules <- planner <- obscura_jax <- experiments),
checked on the source: every import, at the top of a module or inside a function,
may only reach a package to its left. No import circles. And `import schedules`
starts no JAX."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ORDER = ("models", "schedules", "planner", "obscura_jax", "experiments")
JAX_FREE = ("schedules",)      # may not import jax (or flax, optax) at all


def imported_modules(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every import statement in the file, at any depth."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append((node.lineno, node.module))
    return out


def layering_violations(root: Path = ROOT) -> list[str]:
    bad = []
    for i, pkg in enumerate(ORDER[:-1]):
        allowed = set(ORDER[:i + 1])
        for path in sorted((root / pkg).rglob("*.py")):
            for line, module in imported_modules(path):
                top = module.split(".")[0]
                if top in ORDER and top not in allowed:
                    bad.append(f"{path.relative_to(root)}:{line} imports {module}")
                if pkg in JAX_FREE and top in ("jax", "jaxlib", "flax", "optax"):
                    bad.append(f"{path.relative_to(root)}:{line} imports {module} (JAX-free package)")
    return bad


def test_packages_import_only_to_their_left():
    assert layering_violations() == []


def test_the_check_finds_a_function_local_import(tmp_path):
    pkg = tmp_path / "planner"
    pkg.mkdir()
    (pkg / "x.py").write_text("def f():\n    from obscura_jax.runtime.pipeline import build_program\n")
    for other in ("models", "schedules"):
        (tmp_path / other).mkdir()
    assert layering_violations(tmp_path) == ["planner/x.py:2 imports obscura_jax.runtime.pipeline"]


@pytest.mark.parametrize("module", ["schedules", "models", "models.errors", "schedules.sizes",
                                   "planner.profile", "obscura_jax.cli.main",
                                   "planner.costs, planner.search, planner.families, planner.identify"])
def test_light_imports_start_no_jax(module):
    """The packages below the runtime, and the planner's search (costs, search,
    families, identification: planning from files, without devices), start no JAX."""
    code = f"import {module}, sys; print('jax' in sys.modules)"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "False"


def test_the_command_line_parser_starts_no_jax_matplotlib_or_ortools():
    """Every sub-command module is imported to build the parser: their top-level
    imports must stay light (heavy ones are function-local, marked `# lazy:`)."""
    code = ("from obscura_jax.cli.main import build_parser; import sys; build_parser(); "
            "print(sorted(m for m in ('jax', 'matplotlib', 'ortools') if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"


def module_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """Library module -> the library modules it imports (at any depth; `from a import
    b` names a.b when that is a module, else a)."""
    mods = {}
    for pkg in ORDER:
        for path in (root / pkg).rglob("*.py"):
            parts = list(path.relative_to(root).with_suffix("").parts)
            mods[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph = {}
    for name, path in mods.items():
        out = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                out.update(a.name for a in node.names if a.name in mods)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for a in node.names:
                    full = f"{node.module}.{a.name}"
                    if full in mods or node.module in mods:
                        out.add(full if full in mods else node.module)
        graph[name] = out - {name}
    return graph


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected sets of more than one module (Tarjan's algorithm)."""
    index, low, stack, on, found, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_circles():
    assert import_circles(module_graph()) == []


def test_the_check_finds_a_circle():
    graph = {"models.ops": {"models.registry"}, "models.registry": {"models.ops", "models.errors"},
             "models.errors": set()}
    assert import_circles(graph) == [["models.ops", "models.registry"]]


def test_the_runtime_does_not_import_the_command_line():
    """The runtime (obscura_jax outside cli.py, commands/ and __main__) never reaches
    the command line: its one-line errors come from obscura_jax.errors."""
    graph = module_graph()
    cli = {m for m in graph if m in ("obscura_jax.cli.main", "obscura_jax.__main__") or m.startswith("obscura_jax.cli.commands")}
    reach = {m: sorted(deps & cli) for m, deps in graph.items()
             if m.startswith("obscura_jax") and m not in cli and deps & cli}
    assert reach == {}
