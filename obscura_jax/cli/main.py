"""The `obscura` command line: one parser, one sub-command module each.

Every sub-command module in obscura_jax/cli/commands/ (COMMANDS; run_args.py holds the
flags train and compare share) defines `add_parser(subparsers)` (which sets
`func=run` on its parser) and keeps heavy imports (JAX, matplotlib) inside `run`,
so `obscura simulate` never loads JAX.
Every option's help ends with its default (DefaultsHelpFormatter, for all
sub-commands at once); an option whose default needs words says it in its own help.
`--model-module MODULE_OR_PATH` (on every sub-command that takes a model) imports
a user module that registers models (models.registry) before the command runs.
Bad input (an ObscuraError, or a file that cannot be read or written) surfaces as
one line `obscura: error: ...` and exit code 2; a flag argparse rejects, as one line
`obscura CMD: error: ... (see obscura CMD --help)`, exit 2 (OneLineParser). A value
that starts with '-' (`--memory-limit -1GiB`, `--warmup -1,2`) is read as the
flag's value, so its own check answers (OBSCURA_DEBUG=1 shows the
traceback instead); an exception raised in a user's model module is blamed on it:
one line naming its file, line and function, exit 2 (obscura_jax.cli.blame); anything
else is a bug: its traceback, a line asking to report it, exit code 1. The paper-figure and benchmark scripts answer the same way
(`run_command`).
"""
from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys
import traceback
from typing import Callable

from models.errors import ObscuraError
from obscura_jax.cli import blame
from obscura_jax.cli import interrupt
from obscura_jax.cli.files import check_files
from obscura_jax.cli.environment import check_environment, check_jax_environment
from obscura_jax.errors import error_line
from models.registry import load_model_module
from schedules.sizes import parse_int, parse_real

COMMANDS = ("simulate", "model_info", "profile", "plan", "train", "compare", "sweep")
PIPE_CLOSED = 141   # 128 + SIGPIPE


class OneLineParser(argparse.ArgumentParser):
    """argparse's errors as one line with a hint to --help (no usage block), exit 2."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message.splitlines()[0]} (see {self.prog} --help)\n")


def join_dash_values(parser: argparse.ArgumentParser, argv: list[str]) -> list[str]:
    """`--flag -1GiB` -> `--flag=-1GiB` for a flag that takes one value: argparse would
    read '-1GiB' as a flag ("expected one argument") instead of letting the value's
    own check answer."""
    sub = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
    command = sub.choices.get(argv[0]) if sub is not None and argv else None
    actions = {o: a for p in (parser, command) if p is not None for a in p._actions for o in a.option_strings}
    out: list[str] = []
    for tok in argv:
        prev = actions.get(out[-1]) if out else None
        if (prev is not None and prev.nargs is None and tok.startswith("-") and tok != "--"
                and tok.split("=")[0] not in actions):
            out[-1] = f"{out[-1]}={tok}"
        else:
            out.append(tok)
    return out


class DefaultsHelpFormatter(argparse.HelpFormatter):
    """Appends each option's default to its help: "(default: X)", "(default: off)"
    for a switch, "(required)"; help that already names its default is left alone
    (that is where a default needs words, e.g. --adjusted)."""

    def _get_help_string(self, action):
        text = action.help or ""
        if action.help is argparse.SUPPRESS or not action.option_strings \
                or isinstance(action, (argparse._HelpAction, argparse._VersionAction)) \
                or "default" in text.lower():
            return text
        if action.required:
            return f"{text} (required)".strip()
        if isinstance(action, argparse._StoreConstAction) and isinstance(action.const, bool):
            return f"{text} (default: {'on' if action.default else 'off'})".strip()
        if action.default is None:
            return f"{text} (default: none)".strip()
        return f"{text} (default: %(default)s)".strip()


def add_model_module(p: argparse.ArgumentParser) -> None:
    """--model-module, on every sub-command that takes a model."""
    p.add_argument("--model-module", action="append", default=None, metavar="MODULE_OR_PATH",
                   help="import this module (dotted name or .py path) first: it registers models "
                        "of your own (models.register_family / register_config); repeatable "
                        "(default: only the built-in llama and gpt models)")


def ascii_int(text: str) -> int:
    """argparse's `type=int` with ASCII digits only (schedules.sizes.parse_int)."""
    try:
        return parse_int(text)
    except ObscuraError:
        raise ValueError(text) from None


def ascii_float(text: str) -> float:
    """argparse's `type=float` with ASCII digits only (schedules.sizes.parse_real)."""
    try:
        return parse_real(text)
    except ObscuraError:
        raise ValueError(text) from None


ascii_int.__name__, ascii_float.__name__ = "int", "float"   # argparse names the type in its line
ASCII_TYPES = {int: ascii_int, float: ascii_float}


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="obscura", formatter_class=DefaultsHelpFormatter,
        description="Obscura pipeline schedules, planner and JAX pipeline engine.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f"obscura_jax.cli.commands.{name}").add_parser(sub)
    for command in sub.choices.values():
        command.formatter_class = DefaultsHelpFormatter
        for action in command._actions:     # every number flag, whoever declared it: ASCII digits only
            action.type = ASCII_TYPES.get(action.type, action.type)
    return parser


def load_model_modules(args) -> None:
    """Import what --model-module names (before anything looks a model up); an
    error raised in their code later is blamed on them (obscura_jax.cli.blame)."""
    for spec in getattr(args, "model_module", None) or ():
        module = load_model_module(spec)
        blame.note_user_module(module, spec if spec.strip().endswith(".py") else None)


def interrupted(prog: str) -> int:
    """One line (for a train: its last complete checkpoint step), exit 130 (143 after SIGTERM)."""
    print(interrupt.interrupted_line(prog), file=sys.stderr)
    return interrupt.exit_code()


def reader_gone() -> int:
    """stdout's reader closed the pipe (`obscura ... | head`) and the command stopped:
    nothing to say, and nothing more to print. stdout now points at /dev/null, so the
    interpreter's last flush does not fail again; 141 is what a shell shows for a
    process SIGPIPE ended."""
    try:
        stdout_to_null(sys.stdout)
    except (AttributeError, OSError, ValueError):   # not a file (a caller's capture): nothing to redirect
        pass
    return PIPE_CLOSED


def stdout_to_null(stream) -> None:
    """Point the file descriptor under `stream` at /dev/null."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), stream.fileno())


class StdoutAfterReader:
    """sys.stdout for the `obscura` script: once its reader has closed the pipe
    (`obscura plan ... --json p.json | head -3`), what is printed goes to /dev/null and
    the command goes on, so the files it was asked for are still written; its exit
    code is its own. (Without it, the first print after `head` left stops the command
    half-way, the way SIGPIPE stops a C tool.)"""

    def __init__(self, stream):
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            stdout_to_null(self._stream)
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            stdout_to_null(self._stream)

    def __getattr__(self, name):
        return getattr(self._stream, name)


def run_command(prog: str, body: Callable[[], int | None]) -> int:
    """body() -> exit code. An ObscuraError or OSError is bad input: one line
    `<prog>: error: ...`, exit 2, as is an exception raised in a user's model module
    (the line names its file and line). Anything else is a bug: traceback, a line asking
    to report it, exit 1. Ctrl-C: exit 130; SIGTERM: 143. A closed stdout pipe that stopped it
    (where stdout is not a StdoutAfterReader): exit 141, silent."""
    try:
        code = int(body() or 0)
        sys.stdout.flush()   # a closed pipe shows here, while it can still be answered
        return code
    except KeyboardInterrupt:
        return interrupted(prog)
    except SystemExit as e:   # sys.exit in a user's model module: blamed, never a silent exit
        line = blame.exit_line(e)
        if line is None:
            raise
        print(f"{prog}: error: {line}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return reader_gone()
    except (ObscuraError, OSError) as e:
        if interrupt.requested():   # e.g. `import jax` cut short by Ctrl-C
            return interrupted(prog)
        if os.environ.get("OBSCURA_DEBUG"):
            raise
        print(f"{prog}: error: {error_line(e)}", file=sys.stderr)
        return 2
    except Exception as e:  # a bug: show where, and ask for the report
        if interrupt.requested():
            return interrupted(prog)
        blamed = None if os.environ.get("OBSCURA_DEBUG") else blame.blame_line(e)
        if blamed is not None:   # not ours: the user's model module raised it
            print(f"{prog}: error: {blamed}", file=sys.stderr)
            return 2
        traceback.print_exc()
        print(f"{prog}: internal error (a bug): please report it with the traceback above",
              file=sys.stderr)
        return 1


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args, extra = parser.parse_known_args(join_dash_values(parser, argv))
    if extra:   # name the sub-command whose flags these are not
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        sub.choices[argv[0] if argv and argv[0] in sub.choices else args.command.replace("_", "-")].error(
            f"unrecognized arguments: {' '.join(extra)}")
    args.argv = argv   # `--processes N` re-runs it in N processes

    def body():
        check_environment()
        check_jax_environment(args.command.replace("-", "_"))
        check_files(args)
        load_model_modules(args)
        return args.func(args)
    return run_command("obscura", body)


if __name__ == "__main__":
    sys.exit(main())


def stdout_closed() -> None:
    """Every command prints its report on stdout: with stdout closed (not redirected:
    closed, so the next file opened would take its descriptor and receive the
    report) one line says so, exit 2, before anything is read or written."""
    if sys.stderr is not None:
        print("obscura: error: stdout is closed: the command prints its report there; redirect it "
              "(>/dev/null to discard it) instead of closing it", file=sys.stderr, flush=True)
    sys.exit(2)


def entry() -> None:
    """The `obscura` script and `python -m obscura_jax`: main(), then exit with its code.
    Every output is complete (or absent) once main() has returned: files are written
    whole-or-not-at-all and the cleanups ran while the error unwound. So
    - after Ctrl-C (130) or SIGTERM (143) the process leaves without the interpreter's
      teardown: an interrupt inside an XLA compile or call can leave XLA's threads
      running, and tearing the runtime down under them dies of SIGSEGV;
    - Ctrl-C and SIGTERM during the teardown are ignored: the teardown restores their
      default actions, and a late one would kill the process silently (-SIGINT)."""
    if sys.stdout is None:     # started with stdout closed (`obscura ... >&-`)
        stdout_closed()
    interrupt.install()
    sys.stdout = StdoutAfterReader(sys.stdout)
    try:
        code = main()
    except KeyboardInterrupt:   # before run_command took over (building the parser)
        code = interrupted("obscura")
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        code = reader_gone()
    sys.stderr.flush()
    if code in interrupt.EXIT_CODES.values():
        os._exit(code)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    sys.exit(code)
