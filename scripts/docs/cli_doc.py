#!/usr/bin/env python
"""Regenerate the option tables of docs/cli.md from the `obscura` parser, so the page
says what `--help` says (defaults included). Each table sits between
`<!-- options: COMMAND -->` and `<!-- end options -->`; the prose around them is kept.

    python scripts/docs/cli_doc.py            # rewrite docs/cli.md
    python scripts/docs/cli_doc.py --check    # exit 1 if docs/cli.md is out of date
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from obscura_jax.cli.main import build_parser, run_command

DOC = Path(__file__).resolve().parents[2] / "docs" / "cli.md"
BLOCK = re.compile(r"(<!-- options: (\S+) -->\n).*?(<!-- end options -->)", re.S)
# A help's last parenthesis that states the default: "(default 4)", "(default: none; ...)".
DEFAULT = re.compile(r"\s*\((default|required)[^()]*(\([^()]*\)[^()]*)*\)")


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def option_table(command: argparse.ArgumentParser) -> str:
    """One markdown table per argument group: option, default, meaning."""
    lines = []
    for group in command._action_groups:
        actions = [a for a in group._group_actions if not isinstance(a, argparse._HelpAction)]
        if not actions:
            continue
        if group.title not in ("options", "positional arguments"):
            lines += ["", f"*{group.title}*", ""]
        lines += ["| option | default | meaning |", "|---|---|---|"]
        for a in actions:
            name = ", ".join(a.option_strings) or a.dest.upper()
            if a.option_strings and a.nargs != 0:
                name += " " + (a.metavar or a.dest.upper())
            text, said = a.help or "", None
            for said in DEFAULT.finditer(text):
                pass
            if a.required or not a.option_strings:
                default = "required"
            elif said is not None:
                default = re.sub(r"^default:?\s*", "", said.group(0).strip()[1:-1])
                text = text[:said.start()] + text[said.end():]
            elif a.nargs == 0:
                default = "off"
            else:
                default = str(a.default)
            if a.choices:
                text += f" ({', '.join(map(str, a.choices))})"
            lines.append(f"| `{_cell(name)}` | {_cell(default)} | {_cell(text.strip())} |")
    return "\n".join(lines).strip()


def render(doc: str) -> str:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return BLOCK.sub(lambda m: m.group(1) + option_table(sub.choices[m.group(2)]) + "\n" + m.group(3), doc)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="only check that docs/cli.md is current")
    args = ap.parse_args(argv)

    def body():
        old = DOC.read_text()
        new = render(old)
        if args.check:
            if new != old:
                print("docs/cli.md is out of date: run python scripts/docs/cli_doc.py", file=sys.stderr)
                return 1
            return 0
        DOC.write_text(new)
        print(f"wrote {DOC}")
        return 0
    return run_command("cli_doc", body)


if __name__ == "__main__":
    sys.exit(main())
