"""How the `obscura` command line (and every script, through run_command) ends:
only the ObscuraError family and file problems are user errors (one line, exit 2);
anything else is a bug (traceback, a line asking to report it, exit 1)."""
import json
import os
import subprocess
import sys

import pytest

from models.errors import ObscuraError
from obscura_jax.cli import main as cli
from obscura_jax.cli.commands import simulate
from obscura_jax.errors import RunError, UsageError
from planner.errors import PlanError, ProfileError
from schedules.errors import ScheduleError

SIMULATE = ["simulate", "--schedule", "1f1b", "--stages", "2", "--microbatches", "2"]


def test_an_internal_bug_shows_its_traceback_and_exits_1(monkeypatch, capsys):
    def broken(args):
        return {}["no such key"]       # a bug, not bad input
    monkeypatch.setattr(simulate, "run", broken)
    rc = cli.main(SIMULATE)
    err = capsys.readouterr().err
    assert rc == 1
    assert "Traceback (most recent call last)" in err and "KeyError: 'no such key'" in err
    assert err.strip().splitlines()[-1] == \
        "obscura: internal error (a bug): please report it with the traceback above"


def test_a_user_error_is_one_line_and_exits_2(capsys):
    rc = cli.main(["simulate", "--schedule", "1f1b", "--stages", "0", "--microbatches", "2"])
    err = capsys.readouterr().err
    assert rc == 2 and err.splitlines() == ["obscura: error: --stages must be >= 1, got 0"]


def test_a_file_problem_names_the_file(tmp_path, capsys):
    rc = cli.run_command("obscura", lambda: open(tmp_path / "missing.json").read())
    err = capsys.readouterr().err
    assert rc == 2 and err.splitlines() == [f"obscura: error: {tmp_path / 'missing.json'}: No such file or directory"]


@pytest.mark.parametrize("error", [ObscuraError, UsageError, RunError, PlanError, ProfileError, ScheduleError])
def test_the_whole_family_is_a_user_error(error, capsys):
    def body():
        raise error("first line\nsecond line")
    assert cli.run_command("prog", body) == 2
    assert capsys.readouterr().err == "prog: error: first line\n"


def test_plain_value_errors_are_bugs_now(capsys):
    def body():
        raise ValueError("a bare ValueError")
    assert cli.run_command("prog", body) == 1
    assert "ValueError: a bare ValueError" in capsys.readouterr().err


def test_debug_shows_the_traceback_of_user_errors(monkeypatch):
    monkeypatch.setenv("OBSCURA_DEBUG", "1")
    with pytest.raises(UsageError):
        cli.run_command("prog", lambda: (_ for _ in ()).throw(UsageError("x")))


def test_interrupt_and_exit_codes(capsys):
    def interrupted():
        raise KeyboardInterrupt
    assert cli.run_command("prog", interrupted) == 130
    assert cli.run_command("prog", lambda: None) == 0 and cli.run_command("prog", lambda: 3) == 3


def test_a_reader_that_closes_the_pipe_costs_no_output_file(tmp_path):
    """`obscura simulate ... --json sim.json | head -0`: the command goes on without
    printing, writes sim.json, exits 0 with nothing on stderr (not "error: Broken pipe",
    exit 2, no file). The reader is gone before the first write, so every write fails
    (no race with the pipe's buffer)."""
    out = tmp_path / "sim.json"
    command = [sys.executable, "-m", "obscura_jax", "simulate", "--schedule", "1f1b", "--stages", "4",
               "--microbatches", "8", "--ascii", "--json", str(out)]
    read, write = os.pipe()
    os.close(read)
    proc = subprocess.Popen(command, stdout=write, stderr=subprocess.PIPE)
    os.close(write)
    _, err = proc.communicate(timeout=300)     # a bound for a busy machine, not a measurement
    assert (proc.returncode, err) == (0, b"")
    assert json.loads(out.read_text())["makespan"] > 0


def test_a_closed_pipe_that_stops_a_command_is_silent_exit_141(capsys):
    def printing():
        raise BrokenPipeError(32, "Broken pipe")
    assert cli.run_command("prog", printing) == cli.PIPE_CLOSED
    assert capsys.readouterr().err == ""


def _option_blocks(help_text: str) -> dict[str, str]:
    """Each option's block of `--help` text: from its line to the next option or
    section, keyed by its last option string."""
    blocks, key = {}, None
    for line in help_text.splitlines():
        text = line.strip()
        if line.startswith("  -") and not line.startswith("   "):
            key = text.split()[0].rstrip(",")
            for part in text.split(", "):
                if part.startswith("--"):
                    key = part.split()[0]
            blocks[key] = text
        elif key and line.startswith("    ") and text:
            blocks[key] += " " + text
        else:
            key = None
    return blocks


def test_every_option_of_every_subcommand_shows_its_default():
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    assert set(sub.choices) == {"simulate", "model-info", "profile", "plan", "train", "compare", "sweep"}
    for name, command in sub.choices.items():
        blocks = _option_blocks(command.format_help())
        options = [a.option_strings[-1] for a in command._actions if a.option_strings and a.dest != "help"]
        assert set(options) <= set(blocks), (name, sorted(set(options) - set(blocks)))
        silent = [o for o in options if "default" not in blocks[o].lower() and "required" not in blocks[o]]
        assert silent == [], (name, silent)
    train = _option_blocks(sub.choices["train"].format_help())
    assert "default: ALL stages" in train["--adjusted"] and "(default: adamw)" in train["--optimizer"]
    assert "(default: off)" in train["--check"] and "(required)" in _option_blocks(
        sub.choices["plan"].format_help())["--stages"]


@pytest.mark.parametrize("command", ["model-info llama2-tiny", "profile --model x --seq-len 8 --json o.json",
                                     "plan --analytic llama2-tiny --stages 2 --microbatches 2 --memory-limit 1GiB",
                                     "train", "compare --out o", "sweep --model x --seq-len 8 --gpus 8"])
def test_model_module_is_on_every_command_that_takes_a_model(command, tmp_path, capsys):
    rc = cli.main(command.split() + ["--model-module", str(tmp_path / "absent.py")])
    assert rc == 2
    assert capsys.readouterr().err == f"obscura: error: model module {tmp_path / 'absent.py'}: no such file\n"


def test_argparse_errors_are_one_line_with_a_help_hint(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["plan", "--stages", "x"])
    assert e.value.code == 2
    assert capsys.readouterr().err == ("obscura plan: error: argument --stages: invalid int value: 'x' "
                                       "(see obscura plan --help)\n")
    with pytest.raises(SystemExit):
        cli.main(SIMULATE + ["--nope", "1"])
    assert capsys.readouterr().err == ("obscura simulate: error: unrecognized arguments: --nope 1 "
                                       "(see obscura simulate --help)\n")


def test_values_starting_with_a_dash_are_values():
    parser = cli.build_parser()
    join = cli.join_dash_values
    assert join(parser, ["plan", "--memory-limit", "-1GiB", "--no-cmb"]) == ["plan", "--memory-limit=-1GiB", "--no-cmb"]
    assert join(parser, ["simulate", "--warmup", "-1,2", "--ascii"]) == ["simulate", "--warmup=-1,2", "--ascii"]
    # a flag after a flag that takes a value stays a flag; a switch takes no value
    assert join(parser, ["plan", "--json", "--no-cmb"]) == ["plan", "--json", "--no-cmb"]
    assert join(parser, ["plan", "--no-cmb", "-5"]) == ["plan", "--no-cmb", "-5"]


VALUES = [     # numbers in ASCII digits only: Python's int() and float() read other scripts' digits
    (["simulate", "--schedule", "1f1b", "--stages", "٣", "--microbatches", "4"],
     "--stages must be an integer (ASCII digits), got '٣'"),
    (["simulate", "--schedule", "1f1b", "--stages", "2", "--microbatches", "4", "--swap-fraction", "٠.٥"],
     "--swap-fraction must be a number (ASCII digits)"),
    (["simulate", "--schedule", "1f1b", "--stages", "2", "--microbatches", "4", "--fwd", "١"],
     "--fwd must be a number"),
    (["model-info", "llama2-tiny", "--seq-len", "١٢"], "argument --seq-len: invalid int value: '١٢'"),
    (["train", "--lr", "١e-3"], "argument --lr: invalid float value: '١e-3'"),
    (["plan", "--analytic", "llama2-tiny", "--stages", "۲", "--microbatches", "2", "--memory-limit", "1GiB"],
     "argument --stages: invalid int value: '۲'"),
    (["sweep", "--model", "llama2-13b", "--seq-len", "4096", "--gpus", "٨"], "argument --gpus: invalid int value"),
    (["plan", "--analytic", "llama2-tiny", "--stages", "2", "--microbatches", "2", "--memory-limit", "٨٠GiB"],
     "cannot read a memory limit (--memory-limit) from '٨٠GiB'"),
    # lists: an empty list or item is a typo, never "nothing"
    (["simulate", "--schedule", "1f1b", "--stages", "2", "--microbatches", "4", "--warmup", ""], "--warmup is empty"),
    (["simulate", "--schedule", "1f1b", "--stages", "2", "--microbatches", "4", "--warmup", "1,"],
     "--warmup '1,' has an empty item"),
    (["simulate", "--schedule", "recomp", "--stages", "2", "--microbatches", "4", "--adjusted", ""],
     "--adjusted is empty"),
    (["simulate", "--schedule", "recomp", "--stages", "2", "--microbatches", "4", "--recompute", ","],
     "--recompute is empty"),
    (["simulate", "--schedule", "obscura", "--stages", "2", "--microbatches", "4", "--swap-blocks", "1,,1"],
     "--swap-blocks '1,,1' has an empty item"),
]


@pytest.mark.parametrize("argv, needle", VALUES, ids=[" ".join(a)[:60] for a, _ in VALUES])
def test_numbers_are_ascii_and_lists_have_no_empty_item(argv, needle, capsys, tmp_path, monkeypatch):
    from tests.obscura_jax.cli.commands import badinput
    badinput.check(capsys, tmp_path, monkeypatch, argv, needle)
