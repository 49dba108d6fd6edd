#!/usr/bin/env python
"""Every result the docs quote, rendered from its source, so prose, tables and JSON
examples cannot disagree with the results files and commands they come from.

In README.md and docs/*.md:

    <!-- value: NAME -->1.083<!-- end value -->       a figure in prose: VALUES[NAME]()
                                                      (scripts/docs/doc_values.py reads it from
                                                      a committed results file)
    <!-- example: NAME -->                            a JSON example: EXAMPLES[NAME]()
    ```json ... ```                                   (scripts/docs/doc_examples.py runs the
    <!-- end example -->                              command the doc names, abridged)
    <!-- table: NAME -->...<!-- end table -->         docs/reproduction.md's tables
                                                      (scripts/docs/reproduction_tables.py)

and every other number in prose that looks like a result (a number with a unit:
s, ms, us, GiB, MiB, GB, GB/s, TFLOP/s, %, x; or a decimal of two or more places) is
either one of these or listed in doc_values.NOT_RESULTS with the reason it is not
one (an input such as the 80 GiB limit, the paper's own figure, a timeout).

    python scripts/docs/doc_numbers.py --write              # regenerate every value, table and example
    python scripts/docs/doc_numbers.py --check              # exit 1 naming each stale or unsourced figure
    python scripts/docs/doc_numbers.py --check --examples   # ... and rerun the examples' commands

A figure edited by hand, or a results file regenerated without --write, fails the
check (tests/tooling/test_doc_numbers.py, part of make test).
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import doc_values
import reproduction_tables

ROOT = Path(__file__).resolve().parents[2]
VALUE = re.compile(r"<!-- value: ([\w.\-]+) -->(.*?)<!-- end value -->", re.S)
EXAMPLE = re.compile(r"(<!-- example: ([\w.\-]+) -->\n)(.*?)(<!-- end example -->)", re.S)
# What the scan for unsourced figures skips: fenced code, the rendered blocks (cli.md's option
# tables are scripts/docs/cli_doc.py's, from the parser), inline
# code, comments and link targets.
FENCE = re.compile(r"^```.*?^```", re.M | re.S)
BLOCK = re.compile(r"<!-- (table|value|example|options): [\w.\-]+ -->.*?<!-- end \1 -->", re.S)
SKIP = (re.compile(r"<!--.*?-->", re.S), re.compile(r"`[^`\n]*`"), re.compile(r"\]\([^)]*\)"))
UNIT = r"(?:ms|us|µs|s|GiB|MiB|KiB|GB/s|GB|MB|TB|TFLOP/s|%)"
NUMBER = r"\d+(?:\.\d+)?"
FIGURE = re.compile(rf"(?<![\w.\-/]){NUMBER}(?:\s?[-/]\s?{NUMBER})*(?:\s?{UNIT}|x)(?![\w/])"
                    rf"|(?<![\w.\-/])\d+\.\d{{2,}}(?![\w.])")


def doc_paths(root: Path = ROOT) -> list[Path]:
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def _name(path: Path, root: Path) -> str:
    return str(path.relative_to(root))


def rendered_value(name: str) -> str:
    if name not in doc_values.VALUES:
        raise SystemExit(f"unknown value {name!r}: add it to scripts/docs/doc_values.py")
    return doc_values.VALUES[name]()


def render(text: str, doc: str, examples: bool = False) -> str:
    """`text` (the doc named `doc`, e.g. docs/formats.md) with every value, table and,
    when asked, example regenerated from its source."""
    text = VALUE.sub(lambda m: f"<!-- value: {m.group(1)} -->{rendered_value(m.group(1))}<!-- end value -->", text)
    if doc == "docs/reproduction.md":
        text = reproduction_tables.render(text)
    if examples:
        import doc_examples  # lazy: its commands load JAX and the planner
        text = EXAMPLE.sub(lambda m: m.group(1) + doc_examples.rendered(m.group(2)) + m.group(4), text)
    return text


def stale(root: Path = ROOT, examples=False) -> list[str]:
    """One line per value, table or example of the docs under `root` that is not
    what its source gives now (`examples`: True for every JSON example, or the names
    of those to check: each runs its command)."""
    problems = []
    for path in doc_paths(root):
        doc, text = _name(path, root), path.read_text()
        for m in VALUE.finditer(text):
            want = rendered_value(m.group(1))
            if m.group(2) != want:
                problems.append(f"{doc}: value {m.group(1)} reads {m.group(2)!r}, its source gives {want!r}")
        if doc == "docs/reproduction.md" and reproduction_tables.render(text) != text:
            problems.append(f"{doc}: a table differs from its CSV (python scripts/docs/reproduction_tables.py)")
        if examples:
            import doc_examples  # lazy: its commands load JAX and the planner
            for m in EXAMPLE.finditer(text):
                if examples is not True and m.group(2) not in examples:
                    continue
                if m.group(3) != doc_examples.rendered(m.group(2)):
                    problems.append(f"{doc}: example {m.group(2)} differs from what its command writes")
    return problems


def unsourced(root: Path = ROOT) -> list[str]:
    """`doc:line: figure` for every number in prose that looks like a result and is
    neither rendered from its source nor listed in doc_values.NOT_RESULTS."""
    found = []
    for path in doc_paths(root):
        doc = _name(path, root)
        allowed = doc_values.NOT_RESULTS.get(doc, {})
        if isinstance(allowed, tuple) and allowed[0] == doc_values.WHOLE_PAGE:
            continue
        text = path.read_text()
        for rx in (FENCE, BLOCK):
            text = rx.sub(lambda m: "\n" * m.group(0).count("\n"), text)
        for rx in SKIP:
            text = rx.sub(lambda m: " " * len(m.group(0)), text)
        for i, line in enumerate(text.splitlines(), 1):
            for m in FIGURE.finditer(line):
                if m.group(0) not in allowed:
                    found.append(f"{doc}:{i}: {m.group(0)}")
    return found


def write(root: Path = ROOT, examples: bool = True) -> list[str]:
    """Regenerate every doc under `root`; the docs that changed."""
    changed = []
    for path in doc_paths(root):
        text = path.read_text()
        new = render(text, _name(path, root), examples)
        if new != text:
            path.write_text(new)
            changed.append(_name(path, root))
    return changed


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true", help="regenerate every value, table and example")
    mode.add_argument("--check", action="store_true", help="exit 1 naming each stale or unsourced figure")
    ap.add_argument("--examples", action="store_true",
                    help="with --check: also rerun the commands of the JSON examples (tens of seconds)")
    args = ap.parse_args(argv)
    if args.write:
        for doc in write():
            print(f"wrote {doc}")
        return 0
    problems = stale(examples=args.examples) + [f"{u} (not from a source: render it with <!-- value: NAME --> "
                                                f"or list it in doc_values.NOT_RESULTS)" for u in unsourced()]
    for line in problems:
        print(line, file=sys.stderr)
    if problems:
        print("docs quote stale figures: python scripts/docs/doc_numbers.py --write", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
