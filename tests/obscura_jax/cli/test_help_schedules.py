"""Every command that takes a schedule name lists every generator of the registry
(schedules.SCHEDULES) in its --help, as a user reads it: a family added to the
registry shows up in train, compare and simulate without editing their help."""
import pytest

from obscura_jax.cli import main as cli
from schedules import SCHEDULES


@pytest.mark.parametrize("command,flag", [("train", "--schedule"), ("compare", "--schedules"),
                                          ("simulate", "--schedule")])
def test_the_help_lists_every_schedule_of_the_registry(command, flag, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "10000")        # one line per option: no name split at a hyphen
    with pytest.raises(SystemExit) as done:
        cli.main([command, "--help"])
    assert done.value.code == 0
    lines = capsys.readouterr().out.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.strip().startswith(flag + " "))
    end = next((i for i in range(start + 1, len(lines)) if lines[i].lstrip().startswith("-")), len(lines))
    text = " ".join(lines[start:end])         # the option and its help (on the next line when long)
    listed = {name.strip("(),. ") for name in text.replace(",", " ").split()}
    assert [name for name in SCHEDULES if name not in listed] == []
