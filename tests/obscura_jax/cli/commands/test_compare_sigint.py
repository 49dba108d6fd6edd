"""`obscura compare` interrupted: SIGINT at three random moments of a run
(a subprocess each; moments drawn anew on every run of the suite) leaves --out absent
or one whole run's outputs, never a truncated file or files of two runs, and the
process exits 0 or 130 with one line. Its own file: the longest compare test, given
its own xdist worker."""
import json
import os

import pytest

from tests.obscura_jax.cli.commands.test_compare import C


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
def test_sigint_at_three_random_moments_leaves_no_partial_or_mixed_output(tmp_path):
    import random
    import signal
    import subprocess
    import time

    from tests.obscura_jax.mp_helpers import start_ready
    out = tmp_path / "cmp"
    args = [*C, "--schedules", "1f1b", "--out", str(out)]

    def start():
        return start_ready(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

    def finish(proc) -> tuple[int, str]:
        try:
            _, err = proc.communicate(timeout=300)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            raise AssertionError("compare did not end within 300 s")
        return proc.returncode, err

    runs = set()
    for _ in range(2):    # the first compiles (into the run's cache); the second times a run like the three
        proc, ready = start()
        rc, err = finish(proc)
        whole = time.monotonic() - ready     # from its handler's readiness, as the moments below
        assert rc == 0, err[-2000:]
        runs.add(_complete_and_of_one_run(out))
    rng = random.Random()
    for _ in range(3):
        proc, ready = start()
        time.sleep(max(0.0, ready + rng.uniform(0.0, 1.1) * whole - time.monotonic()))
        proc.send_signal(signal.SIGINT)
        rc, err = finish(proc)
        assert rc in (0, 130), err[-2000:]
        if rc == 130:
            assert "Traceback" not in err and err.strip().splitlines()[-1] == "obscura: interrupted", err
        run = _complete_and_of_one_run(out)
        assert run is not None               # the first run's output, or this one's: never none
        runs.add(run)
