"""Files stay readable: none over 400 lines, and a function over 60 lines says why
in its docstring (a line starting "Long:"). Every function-local import says why it
is not at the top (a `# lazy:` comment on it or on the import just above)."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("models", "schedules", "planner", "obscura_jax", "experiments", "scripts")
MAX_FILE_LINES = 400
MAX_FUNCTION_LINES = 60
MAX_FOLDER_MODULES = 20     # a folder holds one part of the architecture; more: split it into wings


def _sources():
    for pkg in PACKAGES:
        yield from sorted((ROOT / pkg).rglob("*.py"))


def _functions(tree):
    return [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]


def test_no_file_over_400_lines():
    long = {str(p.relative_to(ROOT)): n for p in _sources()
            if (n := len(p.read_text().splitlines())) > MAX_FILE_LINES}
    assert long == {}


def folders_over(root: Path = ROOT, most: int = MAX_FOLDER_MODULES) -> dict[str, int]:
    """Folders of the packages and of scripts/ holding more than `most` modules
    (__init__.py not counted)."""
    counts = {}
    for pkg in PACKAGES:
        for folder in [root / pkg, *(p for p in (root / pkg).rglob("*") if p.is_dir())]:
            n = sum(1 for f in folder.glob("*.py") if f.name != "__init__.py")
            if n > most:
                counts[str(folder.relative_to(root))] = n
    return counts


def test_no_folder_holds_more_than_20_modules():
    assert folders_over() == {}


def test_the_folder_check_counts_modules(tmp_path):
    (tmp_path / "planner" / "wing").mkdir(parents=True)
    for i in range(3):
        (tmp_path / "planner" / f"m{i}.py").write_text("")
    (tmp_path / "planner" / "__init__.py").write_text("")
    (tmp_path / "planner" / "wing" / "x.py").write_text("")
    (tmp_path / "scripts" / "bench").mkdir(parents=True)
    for i in range(3):
        (tmp_path / "scripts" / f"s{i}.py").write_text("")
        (tmp_path / "scripts" / "bench" / f"b{i}.py").write_text("")
    (tmp_path / "scripts" / "bench" / "run.sh").write_text("")     # not a module
    assert folders_over(tmp_path, most=2) == {"planner": 3, "scripts": 3, "scripts/bench": 3}


def test_long_functions_give_a_reason():
    unexplained = []
    for path in _sources():
        for fn in _functions(ast.parse(path.read_text())):
            length = fn.end_lineno - fn.lineno + 1
            doc = ast.get_docstring(fn) or ""
            if length > MAX_FUNCTION_LINES and not any(l.strip().startswith("Long:") for l in doc.splitlines()):
                unexplained.append(f"{path.relative_to(ROOT)}:{fn.lineno} {fn.name} ({length} lines)")
    assert unexplained == []


def test_function_local_imports_say_why():
    """A function-local import saves start-up time (JAX, matplotlib, OR-Tools, orbax)
    or must wait for devices to be chosen; it carries a `# lazy:` comment, on its own
    line or on the first of a group of imports right above it."""
    unexplained = []
    for path in _sources():
        lines = path.read_text().splitlines()
        tree = ast.parse("\n".join(lines))
        for fn in _functions(tree):
            body_imports = [n for n in ast.walk(fn) if isinstance(n, (ast.Import, ast.ImportFrom))]
            for node in body_imports:
                if not _explained(lines, node.lineno - 1):
                    unexplained.append(f"{path.relative_to(ROOT)}:{node.lineno} {lines[node.lineno - 1].strip()}")
    assert unexplained == []


def _explained(lines: list[str], i: int) -> bool:
    """`# lazy:` on line i, on a comment line right above, or on an import above it
    in the same unbroken run of import lines."""
    while i >= 0:
        text = lines[i].strip()
        if "# lazy:" in text or "# lazy (" in text:
            return True
        if not (text.startswith(("import ", "from ")) or text.startswith("#")
                or text.endswith(",") or text.endswith(")")):
            return False
        i -= 1
    return False
