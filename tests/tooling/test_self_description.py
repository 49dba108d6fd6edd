"""The library describes itself, not the work that made it: no source file, script,
doc or Makefile comment cites a tracker entry by number, a findings file that is not
in the repository, a machine as borrowed by the work, or the CPU machine by its
nickname (PHRASES). Each such phrase is rewritten to say what it means (the machine,
the results file, the BENCHMARKS.md section or the docs section)."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("models", "schedules", "planner", "obscura_jax", "experiments", "scripts", "examples")
TOP_FILES = ("README.md", "Makefile")

PHRASES = re.compile(r"(?i:(?<![a-z])issues?[ _#]*\d+|\blent\b|\b2-core (?:dev )?box\b)|\bFINDINGS\b")   # a file's name

# Files allowed to hold a phrase, each with the phrase it holds; an entry goes when
# its file is rewritten (test_known_exceptions_still_hold says when).
KNOWN: dict = {}


def scanned_files(root: Path = ROOT) -> list[Path]:
    """Every .py of the packages, scripts and tests (this one aside), docs/*.md, README.md and the Makefile."""
    files = [p for pkg in PACKAGES for p in sorted((root / pkg).rglob("*.py"))]
    files += [p for p in sorted((root / "tests").rglob("*.py")) if p.name != Path(__file__).name]  # it plants them
    files += sorted((root / "docs").glob("*.md"))
    return files + [root / name for name in TOP_FILES if (root / name).exists()]


def findings(files, root: Path = ROOT) -> list[str]:
    """`path:line: phrase` for every phrase that speaks of the work, not the library."""
    out = []
    for path in files:
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            out += [f"{path.relative_to(root)}:{n}: {m.group(0)}" for m in PHRASES.finditer(line)]
    return out


def test_sources_and_docs_speak_of_the_library():
    bad = [f for f in findings(scanned_files())
           if f.split(":")[0] not in KNOWN or not f.endswith(": " + KNOWN[f.split(":")[0]])]
    assert bad == []


def test_known_exceptions_still_hold():
    """An entry of KNOWN whose file no longer holds its phrase is removed from KNOWN."""
    found = {f.split(":")[0] for f in findings(scanned_files())}
    assert sorted(set(KNOWN) - found) == []


def test_the_scan_finds_planted_phrases(tmp_path):
    (tmp_path / "pkg").mkdir()
    planted = tmp_path / "pkg" / "mod.py"
    # spelled apart: this file's own source holds none of the phrases it plants
    cite, plural, glued = "issue" + " 11", "issues" + " #23", "issue" + "13"
    notes, lent, box = "FIND" + "INGS", "le" + "nt", "2-core" + " box"
    planted.write_text(f'"""Found in {cite} ({notes} §3) on the {lent} H200."""\n'
                       f"# measured on the {box} ({plural})\n"
                       "ORDER = 'the global issue order'   # not a citation\n"
                       f"def test_{glued}_inputs(): pass\n")
    got = findings([planted], tmp_path)
    assert got == [f"pkg/mod.py:1: {cite}", f"pkg/mod.py:1: {notes}", f"pkg/mod.py:1: {lent}",
                   f"pkg/mod.py:2: {box}", f"pkg/mod.py:2: {plural}", f"pkg/mod.py:4: {glued}"]


def test_the_scan_covers_packages_scripts_and_docs():
    names = {str(p.relative_to(ROOT)) for p in scanned_files()}
    assert {"schedules/deps.py", "scripts/tables/zoo_grid.py", "docs/design.md", "README.md", "Makefile"} <= names
