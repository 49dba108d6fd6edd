"""The `obscura` command line: one parser, one sub-command module each.

Every sub-command module in obscura_jax/commands/ defines
`add_parser(subparsers)` (which sets `func=run` on its parser) and keeps heavy
imports (JAX, matplotlib) inside `run`, so `obscura simulate` never loads JAX.
Bad input anywhere surfaces as one line `obscura: error: ...` and exit code 2;
set OBSCURA_DEBUG=1 to see the traceback instead.
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys

COMMANDS = ("simulate", "model_info", "profile", "plan", "train", "compare", "sweep")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="obscura",
        description="Obscura pipeline schedules, planner and JAX pipeline engine.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f"obscura_jax.commands.{name}").add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        result = args.func(args)
    except KeyboardInterrupt:
        print("obscura: interrupted", file=sys.stderr)
        return 130
    except (ValueError, OSError, KeyError) as e:  # bad input: one clear line
        if os.environ.get("OBSCURA_DEBUG"):
            raise
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        if isinstance(e, KeyError):
            msg = f"unknown name {msg}"
        print(f"obscura: error: {msg}", file=sys.stderr)
        return 2
    return int(result or 0)


if __name__ == "__main__":
    sys.exit(main())
