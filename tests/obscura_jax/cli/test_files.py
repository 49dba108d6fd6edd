"""The files a command is given (obscura_jax.cli.files), checked before any work:
outputs that are not regular files are never replaced, inputs that are not regular
files are never read, JSON inputs within depth and integer bounds, schedule files
within the pipeline bounds. (Each flag end to end: the fuzz tables in commands/.)"""
import argparse
import json
import os
import socket

import pytest

from obscura_jax.cli.files import (MAX_INT_DIGITS, MAX_JSON_DEPTH, _csv_counts, _kind, check_files,
                                   check_input_file)
from obscura_jax.errors import UsageError


def ns(**kw):
    return argparse.Namespace(**kw)


def test_what_is_not_a_regular_file(tmp_path):
    os.mkfifo(tmp_path / "fifo")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(tmp_path / "sock"))
    (tmp_path / "plain").write_text("x")
    os.symlink(tmp_path / "plain", tmp_path / "link")
    try:
        assert _kind(str(tmp_path / "fifo")) == "a FIFO"
        assert _kind(str(tmp_path / "sock")) == "a socket"
        assert _kind("/dev/null") == _kind("/dev/zero") == "a character device"
        assert _kind(str(tmp_path)) == "a directory"
        assert _kind(str(tmp_path / "plain")) is _kind(str(tmp_path / "link")) is _kind(str(tmp_path / "no")) is None
    finally:
        sock.close()


@pytest.mark.parametrize("dest, flag", [("json", "--json"), ("csv", "--csv"), ("trace", "--trace"),
                                        ("torch_csv", "--torch-csv"), ("schedule_json", "--schedule-json")])
def test_an_output_onto_a_device_or_fifo_is_refused(dest, flag, tmp_path):
    os.mkfifo(tmp_path / "fifo")
    for target in ("/dev/null", str(tmp_path / "fifo")):
        with pytest.raises(UsageError, match=f"{flag} {target}: is a .*, not a regular file: refusing to replace"):
            check_files(ns(**{dest: target}))
    check_files(ns(**{dest: str(tmp_path / "new.json")}))      # absent or regular: written
    with pytest.raises(UsageError, match=f"{flag} {tmp_path}: is a directory, expected a file path"):
        check_files(ns(**{dest: str(tmp_path)}))


def test_the_gantt_svg_and_compare_out_are_checked_too(tmp_path):
    os.mkfifo(tmp_path / "chart.svg")
    with pytest.raises(UsageError, match="--gantt .*chart.svg: is a FIFO"):
        check_files(ns(gantt=str(tmp_path / "chart.png")))
    with pytest.raises(UsageError, match="--out /dev/null: is a character device, not a directory"):
        check_files(ns(out="/dev/null"))
    (tmp_path / "file").write_text("x")
    for dest, flag in (("checkpoint_dir", "--checkpoint-dir"), ("xla_profile", "--xla-profile"), ("out", "--out")):
        with pytest.raises(UsageError, match=f"{flag} .*file: is a file, not a directory"):
            check_files(ns(**{dest: str(tmp_path / "file")}))
        with pytest.raises(UsageError, match=f"{flag} /proc/obscura/d: cannot write there"):
            check_files(ns(**{dest: "/proc/obscura/d"}))
        check_files(ns(**{dest: str(tmp_path / "new" / "d")}))   # created by the command


@pytest.mark.parametrize("dest", ["data", "plan", "schedule", "from_schedule", "costs", "calibration", "profile",
                                  "measured", "from_torch_csv"])
def test_an_input_that_is_not_a_regular_file_is_never_read(dest, tmp_path):
    os.mkfifo(tmp_path / "fifo")       # opening it to read would block for ever
    for path, what in ((str(tmp_path / "fifo"), "a FIFO"), ("/dev/zero", "a character device")):
        with pytest.raises(UsageError, match=f"{path}: is {what}, not a regular file"):
            check_files(ns(**{dest: path}))


def test_json_nesting_and_integer_size_are_bounded(tmp_path):
    deep, wide, big, ok = (tmp_path / n for n in ("deep.json", "wide.json", "big.json", "ok.json"))
    deep.write_text("[" * 200_000 + "]" * 200_000)
    wide.write_text('{"a": "' + "[" * 5000 + '", "b": ' + "[" * (MAX_JSON_DEPTH - 1) + "]" * (MAX_JSON_DEPTH - 1) + "}")
    big.write_text('{"num_stages": ' + "9" * 5000 + "}")
    ok.write_text(json.dumps({"n": int("9" * MAX_INT_DIGITS)}))
    with pytest.raises(UsageError, match="--plan .*deep.json: JSON nested 200000 deep; at most 500"):
        check_input_file(str(deep), "--plan", json_file=True)
    with pytest.raises(UsageError, match="JSON holds an integer of 5000 digits"):
        check_input_file(str(big), "--costs", json_file=True)
    check_input_file(str(wide), "--costs", json_file=True)    # brackets inside a string are text
    check_input_file(str(ok), "--costs", json_file=True)
    (tmp_path / "bad.json").write_text("{nope")                # malformed: the one reader's line, naming the flag
    with pytest.raises(UsageError, match="malformed --costs .*bad.json: Expecting property name"):
        check_input_file(str(tmp_path / "bad.json"), "--costs", json_file=True)


def test_schedule_and_plan_files_are_held_to_the_pipeline_bounds(tmp_path):
    def sched(**kw):
        path = tmp_path / "s.json"
        path.write_text(json.dumps({"format": "obscura-schedule/1", "name": "x", **kw}))
        return str(path)
    with pytest.raises(UsageError, match="number of micro-batches must be <= 65536, got 1000000000000"):
        check_files(ns(from_schedule=sched(num_stages=2, num_microbatches=10 ** 12, stages=[])))
    with pytest.raises(UsageError, match="--plan .*number of stages must be <= 1024, got 3000"):
        check_files(ns(plan=sched(stages=[{}] * 3000)))
    check_files(ns(schedule=sched(num_stages=4, num_microbatches=8)))
    csv = tmp_path / "t.csv"
    csv.write_text("0F0,0F99999999999\n1F0,(1F1;0B2)OVERLAP_F_B\n")
    assert _csv_counts(str(csv)) == (2, 10 ** 11)
    with pytest.raises(UsageError, match="--from-torch-csv .*micro-batches must be <= 65536"):
        check_files(ns(from_torch_csv=str(csv)))
    csv.write_text("\n".join(f"{s}F0" for s in range(3000)) + "\n")
    with pytest.raises(UsageError, match="number of stages must be <= 1024, got 3000"):
        check_files(ns(from_torch_csv=str(csv)))
    csv.write_text("0F" + "9" * 100_000 + "\n")      # int() of it would fail
    with pytest.raises(UsageError, match="--from-torch-csv .*index of 100000 digits is past this tool's bounds"):
        check_files(ns(from_torch_csv=str(csv)))


def test_outputs_never_land_on_inputs_or_each_other(tmp_path, monkeypatch):
    """Compared by the file each would write: symlinks resolved, a Gantt chart's SVG
    included; a dangling symlink is never written through."""
    monkeypatch.chdir(tmp_path)
    for name in ("in.json", "tok.npy", "t.csv"):
        (tmp_path / name).write_text("{}")
    os.symlink("in.json", tmp_path / "link.json")
    os.symlink("/nonexistent-obscura/x.json", tmp_path / "dangling.json")
    os.mkdir(tmp_path / "out")
    (tmp_path / "out" / "in.json").write_text("{}")
    cases = [
        (dict(profile="in.json", json="in.json"), "--json in.json would overwrite the input --profile in.json"),
        (dict(from_schedule="in.json", json="./in.json"), "would overwrite the input --from-schedule in.json"),
        (dict(plan="in.json", json="link.json"), "--json link.json would overwrite the input --plan in.json"),
        (dict(data="tok.npy", trace="tok.npy"), "--trace tok.npy would overwrite the input --data tok.npy"),
        (dict(costs="in.json", json="in.json"), "would overwrite the input --costs"),
        (dict(from_torch_csv="t.csv", torch_csv="t.csv"), "would overwrite the input --from-torch-csv"),
        (dict(json="same.json", trace="same.json"), "--json same.json and --trace same.json name one file"),
        (dict(json="x", csv="x"), "--json x and --csv x name one file"),
        (dict(gantt="g.png", trace="g.svg"), "--gantt g.svg and --trace g.svg name one file"),
        (dict(json="o.json", checkpoint_dir="o.json"), "--json o.json and --checkpoint-dir o.json name one file"),
        (dict(out="out", data="out/in.json"), "--data out/in.json lies inside --out out, which the command "
                                              "replaces whole"),
        (dict(json="dangling.json"), "--json dangling.json: is a symlink to /nonexistent-obscura/x.json, which "
                                     "does not exist: refusing to write through it"),
        (dict(checkpoint_dir="dangling.json"), "--checkpoint-dir dangling.json: is a symlink to"),
    ]
    for kw, needle in cases:
        with pytest.raises(UsageError) as e:
            check_files(ns(**kw))
        assert needle in str(e.value), (kw, str(e.value))
    check_files(ns(data="synthetic", json="synthetic"))       # a keyword is no file
    check_files(ns(schedule="1f1b", json="1f1b"))             # nor a generator's name
    assert not os.path.exists("/nonexistent-obscura")


def test_each_command_answers_before_any_work(capsys, tmp_path, monkeypatch):
    """The same checks end to end, with default flags: one line, exit 2, no file
    written or changed (the fuzz's lost and damaged files)."""
    from tests.obscura_jax.cli.commands import badinput
    sim = ["simulate", "--schedule", "1f1b", "--stages", "2", "--microbatches", "4"]
    assert badinput.run(capsys, sim + ["--schedule-json", str(tmp_path / "s.json"),
                                       "--torch-csv", str(tmp_path / "t.csv")])[0] == 0
    for name in ("prof.json", "plan.json", "c.json", "tok.npy", "cal.json"):
        (tmp_path / name).write_text("{}")
    os.symlink("s.json", tmp_path / "link.json")
    os.symlink("/nonexistent-obscura/x", tmp_path / "dangling.json")
    cases = [
        (["plan", "--profile", "prof.json", "--stages", "2", "--microbatches", "2", "--memory-limit", "1GiB",
          "--json", "prof.json"], "--json prof.json would overwrite the input --profile prof.json"),
        (["simulate", "--from-schedule", "s.json", "--json", "s.json"], "would overwrite the input --from-schedule"),
        (["simulate", "--from-schedule", "s.json", "--json", "link.json"], "--json link.json would overwrite"),
        (["simulate", "--from-torch-csv", "t.csv", "--torch-csv", "t.csv"], "would overwrite the input"),
        (sim + ["--costs", "c.json", "--json", "c.json"], "would overwrite the input --costs c.json"),
        (sim + ["--calibration", "cal.json", "--trace", "cal.json"], "would overwrite the input --calibration"),
        (sim + ["--json", "same.json", "--trace", "same.json"], "--json same.json and --trace same.json name one file"),
        (sim + ["--json", "dangling.json"], "--json dangling.json: is a symlink to /nonexistent-obscura/x"),
        (["sweep", "--model", "llama2-13b", "--seq-len", "4096", "--gpus", "8", "--json", "x", "--csv", "x"],
         "--json x and --csv x name one file"),
        (["train", "--plan", "plan.json", "--json", "plan.json"], "--json plan.json would overwrite the input --plan"),
        (["train", "--data", "tok.npy", "--trace", "tok.npy"], "--trace tok.npy would overwrite the input --data"),
        (["train", "--checkpoint-dir", "out.json", "--json", "out.json"],
         "--json out.json and --checkpoint-dir out.json name one file"),
        (["train", "--xla-profile", "/proc/obscura-xla"], "--xla-profile /proc/obscura-xla: cannot write there"),
        (["train", "--checkpoint-dir", "/proc/obscura-ck"], "--checkpoint-dir /proc/obscura-ck: cannot write there"),
    ]
    for argv, needle in cases:
        badinput.check(capsys, tmp_path, monkeypatch, argv, needle)
    assert not os.path.exists("/nonexistent-obscura")
