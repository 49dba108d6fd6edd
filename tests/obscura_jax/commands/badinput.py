"""The bad-input contract every sub-command keeps (issue 13): exit 2, exactly one
line on stderr naming the problem, no traceback, and no file written.

`check(capsys, tmp_path, argv, needle)` runs `obscura argv` in-process (cli.main,
argparse's own exits included) with the working directory at tmp_path, and checks
all four; `{tmp}` in argv stands for tmp_path."""
import os

from obscura_jax.cli import main


def files_under(root) -> dict:
    out = {}
    for folder, _, names in os.walk(root):
        for n in names:
            path = os.path.join(folder, n)
            out[os.path.relpath(path, root)] = os.stat(path).st_mtime_ns
    return out


def run(capsys, argv) -> tuple[int, str, str]:
    try:
        rc = main(argv)
    except SystemExit as e:      # argparse's errors exit from inside parse_args
        rc = e.code
    out, err = capsys.readouterr()
    return rc, out, err


def check(capsys, tmp_path, monkeypatch, argv, needle) -> str:
    monkeypatch.chdir(tmp_path)
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    before = files_under(tmp_path)
    rc, _, err = run(capsys, argv)
    assert rc == 2, (argv, rc, err)
    assert err.count("\n") == 1 and err.endswith("\n"), (argv, err)
    assert "Traceback" not in err and err.startswith("obscura"), (argv, err)
    assert needle in err, (argv, needle, err)
    assert files_under(tmp_path) == before, (argv, "wrote files")
    return err
