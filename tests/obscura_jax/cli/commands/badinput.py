"""The bad-input contract every sub-command keeps: exit 2, exactly one
line on stderr naming the problem, no traceback, and no file written.

`check(capsys, tmp_path, argv, needle)` runs `obscura argv` in-process (cli.main,
argparse's own exits included) with the working directory at tmp_path, and checks
all four; `{tmp}` in argv stands for tmp_path. `odd_files(tmp_path)` makes the odd
inputs there: a FIFO, JSON nested 200,000 deep, a 5,000-digit integer, schedule
files past the pipeline bounds, an empty token file."""
import json
import os

import numpy as np

from obscura_jax.cli.main import main


def odd_files(root) -> None:
    """fifo (never opened: a test that reads it would block), deep.json, bigint.json,
    m12.json (10^12 micro-batches), s3000.json (3,000 stages), big.csv (a torch cell
    0F99999999999), s3000.csv (3,000 ranks), empty.npy."""
    os.mkfifo(os.path.join(root, "fifo"))
    with open(os.path.join(root, "deep.json"), "w") as f:
        f.write("[" * 200_000 + "]" * 200_000)
    with open(os.path.join(root, "bigint.json"), "w") as f:
        f.write('{"num_stages": ' + "9" * 5000 + "}")
    for name, p, m in (("m12.json", 2, 10 ** 12), ("s3000.json", 3000, 1)):
        with open(os.path.join(root, name), "w") as f:
            json.dump({"format": "obscura-schedule/1", "name": "x", "num_stages": p, "num_microbatches": m,
                       "stages": [{"actions": ["F0", "B0"]}] * p}, f)
    with open(os.path.join(root, "big.csv"), "w") as f:
        f.write("0F99999999999,0B99999999999\n")
    with open(os.path.join(root, "s3000.csv"), "w") as f:
        f.write("".join(f"{s}F0\n" for s in range(3000)))
    np.save(os.path.join(root, "empty.npy"), np.array([], dtype=np.int32))


def files_under(root) -> dict:
    out = {}
    for folder, _, names in os.walk(root):
        for n in names:
            path = os.path.join(folder, n)
            out[os.path.relpath(path, root)] = os.lstat(path).st_mtime_ns     # a dangling symlink too
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
