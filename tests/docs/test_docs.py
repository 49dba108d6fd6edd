"""The documentation inside the repository: every relative link in README.md and
docs/*.md resolves in a fresh clone (files and #anchors); docs/api.md's script runs;
docs/cli.md names every option of every command."""
import argparse
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.M | re.S)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped (but - and _),
    spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = FENCE.sub("", path.read_text())
    seen: dict[str, int] = {}
    out = set()
    for line in text.splitlines():
        m = re.match(r"^#{1,6}\s+(.*)$", line)
        if m:
            base = slug(m.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            out.add(base if n == 0 else f"{base}-{n}")
    return out


def broken_links(root: Path) -> list[str]:
    bad = []
    for doc in [root / "README.md", *sorted((root / "docs").glob("*.md"))]:
        for target in LINK.findall(FENCE.sub("", doc.read_text())):
            if re.match(r"^[a-z]+:", target):       # http:, https:, mailto:: not ours to check
                continue
            path_part, _, anchor = target.partition("#")
            dest = (doc.parent / path_part).resolve() if path_part else doc
            if not dest.exists() or not dest.resolve().is_relative_to(root.resolve()):
                bad.append(f"{doc.relative_to(root)}: {target} (no such file in the repository)")
            elif anchor and (dest.suffix != ".md" or anchor not in anchors(dest)):
                bad.append(f"{doc.relative_to(root)}: {target} (no heading #{anchor})")
    return bad


@pytest.fixture(scope="module")
def clone(tmp_path_factory):
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    dest = tmp_path_factory.mktemp("clone") / "repo"
    r = subprocess.run(["git", "clone", "--quiet", str(ROOT), str(dest)], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    return dest


def test_every_relative_link_resolves_in_a_fresh_clone(clone):
    assert (clone / "docs" / "api.md").exists() and (clone / "docs" / "cli.md").exists()
    assert broken_links(clone) == []
    for doc in [clone / "README.md", *clone.glob("docs/*.md")]:
        assert "../shared" not in doc.read_text(), doc.name


def test_the_check_finds_a_broken_file_and_anchor(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# Title `x`, y/z\n\n## Two\n")
    (tmp_path / "README.md").write_text("[ok](docs/a.md#title-x-yz) [ok2](docs/a.md#two) [no](docs/b.md) "
                                        "[no2](docs/a.md#three) [web](https://example.com/x)\n"
                                        "```\n[in code](nowhere.md)\n```\n")
    assert broken_links(tmp_path) == ["README.md: docs/b.md (no such file in the repository)",
                                      "README.md: docs/a.md#three (no heading #three)"]


@pytest.mark.slow
def test_the_api_page_script_runs(tmp_path):
    text = (ROOT / "docs" / "api.md").read_text()
    script = re.search(r"```python\n(.*?)```", text, re.S).group(1)
    assert len(script.splitlines()) <= 25
    (tmp_path / "first.py").write_text(script)
    r = subprocess.run([sys.executable, "first.py"], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "equal to the unpipelined model" in r.stdout and (tmp_path / "api_gantt.png").exists()


def test_the_cli_page_names_every_option_of_every_command():
    from obscura_jax.cli.main import build_parser

    text = (ROOT / "docs" / "cli.md").read_text()
    sections = dict(re.findall(r"^## obscura (\S+)\n(.*?)(?=^## )", text + "\n## end", re.M | re.S))
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    for name, command in sub.choices.items():
        assert name in sections, name
        missing = [o for a in command._actions for o in a.option_strings
                   if o.startswith("--") and a.dest != "help" and f"`{o}" not in sections[name]]
        assert missing == [], (name, missing)


OUTSIDE = ("../shared", "spec section", "spec/obscura.md", "spec/layouts.md", "device-notes")


def pointers_outside(root: Path = ROOT) -> list[str]:
    """Lines of the library, scripts, examples and docs that send a reader outside the
    repository (the sibling shared/ folder, its spec's sections, its device notes)."""
    found = []
    for path in sorted([*root.glob("*.md"), *root.glob("docs/*.md"), *root.glob("results/**/*.md"),
                        *(p for pkg in ("models", "schedules", "planner", "obscura_jax", "scripts", "examples")
                          for p in (root / pkg).rglob("*.py"))]):
        for i, line in enumerate(path.read_text().splitlines(), 1):
            if any(word in line for word in OUTSIDE):
                found.append(f"{path.relative_to(root)}:{i}")
    return found


def test_docstrings_and_docs_point_only_inside_the_repository():
    assert pointers_outside() == []


def test_the_check_finds_a_pointer_outside(tmp_path):
    (tmp_path / "planner").mkdir()
    (tmp_path / "planner" / "x.py").write_text('"""Partition adjustment (spec section 6)."""\n')
    assert pointers_outside(tmp_path) == ["planner/x.py:1"]
