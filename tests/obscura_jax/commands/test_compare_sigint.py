"""`obscura compare` interrupted (issue 13): SIGINT at five random moments of a run
(a subprocess each) leaves --out absent or one whole run's outputs, never a
truncated file or files of two runs, and the process exits 0 or 130 with one line.
Its own file: the longest compare test, given its own xdist worker."""
import json
import os

import pytest

from tests.obscura_jax.commands.test_compare import C


def _complete_and_of_one_run(out) -> str | None:
    """None if --out is absent, else the run id every file in it shares; no
    truncated chart, no file of another run, no temporary directory beside it."""
    assert not [p for p in out.parent.iterdir() if p.name.startswith(f".{out.name}.")]
    if not out.exists():
        return None
    run = json.loads((out / "compare.json").read_text())["compare_run"]
    stems = {r["schedule"] for r in json.loads((out / "compare.json").read_text())["runs"]}
    for stem in stems:
        assert json.loads((out / f"{stem}.json").read_text())["compare_run"] == run
    for png in out.glob("*.png"):
        assert png.read_bytes().endswith(b"IEND\xaeB`\x82"), png
    for svg in out.glob("*.svg"):
        assert svg.read_text().rstrip().endswith("</svg>"), svg
    assert (out / "table.txt").read_text().endswith("\n")
    return run


@pytest.mark.slow
def test_sigint_at_five_random_moments_leaves_no_partial_or_mixed_output(tmp_path):
    import random
    import signal
    import subprocess
    import sys
    import time

    from tests.obscura_jax.mp_helpers import ROOT
    out = tmp_path / "cmp"
    argv = [sys.executable, "-m", "obscura_jax", *C, "--schedules", "1f1b", "--out", str(out)]
    runs = set()
    for _ in range(2):    # the first compiles (into the run's cache); the second times a run like the five
        t0 = time.monotonic()
        done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=300)
        whole = time.monotonic() - t0
        assert done.returncode == 0, done.stderr[-2000:]
        runs.add(_complete_and_of_one_run(out))
    rng = random.Random()
    for _ in range(5):
        proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)
        time.sleep(rng.uniform(0.1, 1.1) * whole)
        proc.send_signal(signal.SIGINT)
        try:
            _, err = proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            raise AssertionError("compare did not stop within 120 s of SIGINT")
        assert proc.returncode in (0, 130), err[-2000:]
        if proc.returncode == 130:
            assert "Traceback" not in err and err.strip().splitlines()[-1] == "obscura: interrupted", err
        run = _complete_and_of_one_run(out)
        assert run is not None               # the first run's output, or this one's: never none
        runs.add(run)
