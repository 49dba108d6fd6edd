"""`obscura sweep` end to end through the one CLI parser: table, CSV, JSON, and
one-line errors with exit code 2 for bad input."""
import csv
import json

import pytest

from obscura_jax.cli.main import main
from obscura_jax.cli.commands.sweep import default_global_batch
from planner.layouts.measured import BENCH_REVISION, FORMAT

SMALL = ["--micro-batches", "1,2", "--pp", "1,2,4", "--tp", "1,2", "--policies", "none,full",
         "--attention", "cudnn", "--measured", "none"]


def run(capsys, *argv):
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def test_table_csv_and_json(capsys, tmp_path):
    js, cs = tmp_path / "sweep.json", tmp_path / "sweep.csv"
    rc, out, err = run(capsys, "sweep", "--model", "llama2-13b", "--seq-len", "2048", "--gpus", "64",
                       "--global-batch", "512", *SMALL, "--json", str(js), "--csv", str(cs),
                       "--top", "5")
    assert rc == 0, err
    assert "layer costs: analytic roofline" in out and "MFU" in out and "mbs/TP/PP/SP" in out
    assert "best by micro-batch" in out and "analytic" in out
    table = [l for l in out.splitlines() if l[:3].strip().isdigit() and "%" in l]
    assert len(table) == 5
    data = json.loads(js.read_text())
    assert data["format"] == "obscura-sweep/1" and data["gpus"] == 64 and data["global_batch"] == 512
    assert data["measured_layer_costs"] is None
    fits = [l for l in data["layouts"] if l["fits"]]
    assert fits and [l["mfu"] for l in fits] == sorted((l["mfu"] for l in fits), reverse=True)
    # 2 mbs x (3 PP + 3 PP x 2 SP) x 2 policies
    assert data["num_layouts"] == len(data["layouts"]) == 2 * 9 * 2
    rows = list(csv.DictReader(cs.open()))
    assert len(rows) == len(data["layouts"])
    assert rows[0]["rank"] == "1" and float(rows[0]["mfu"]) == pytest.approx(fits[0]["mfu"], rel=1e-4)
    assert rows[0]["label"] == fits[0]["label"] and rows[0]["cost_source"] == "analytic"
    # the printed top row is the JSON's first layout
    assert fits[0]["label"] in table[0] and f"{fits[0]['mfu'] * 100:.1f}%" in table[0]


def test_measured_file_is_used_and_marked(capsys, tmp_path):
    import models
    from planner.layouts import layer_key
    entries = [{"model": "llama2-13b", "layer": layer_key(models.get_config("llama2-13b")), "seq_len": 2048, "micro_batch": 1,
                "attention": "cudnn", "policy": p, "status": "measured", "fwd_time": 0.003,
                "bwd_time": b, "residual_bytes": r, "temp_bytes": None}
               for p, b, r in (("none", 0.006, 394264576), ("full", 0.0075, 41943040))]
    path = tmp_path / "layers.json"
    path.write_text(json.dumps({"format": FORMAT, "bench_revision": BENCH_REVISION, "device": "NVIDIA H200", "entries": entries}))
    argv = [a for a in SMALL if a not in ("--measured", "none")]
    rc, out, err = run(capsys, "sweep", "--model", "llama2-13b", "--seq-len", "2048", "--gpus", "64",
                       "--global-batch", "512", *argv, "--measured", str(path))
    assert rc == 0, err
    assert f"measured file {path}, NVIDIA H200" in out
    assert "measured layer costs" in out


def test_default_global_batch_is_4m_tokens():
    assert default_global_batch(64, 2048) == 2048
    assert default_global_batch(64, 8192) == 512
    assert default_global_batch(6, 2048) % 6 == 0


BASE = ["sweep", "--seq-len", "2048"]


@pytest.mark.parametrize("argv, text", [
    (BASE + ["--model", "llama2-99b", "--gpus", "64"], "unknown model 'llama2-99b'"),
    (BASE + ["--model", "llama2-13b", "--gpus", "6", "--pp", "4,8", "--tp", "1"],
     "6 GPUs are not divisible by PP*TP"),
    (BASE + ["--model", "llama2-13b", "--gpus", "64", "--global-batch", "2"],
     "global batch 2 is not divisible by DP*micro-batch"),
    (BASE + ["--model", "llama2-13b", "--gpus", "0"], "--gpus must be >= 1"),
    (BASE + ["--model", "llama2-13b", "--gpus", "64", "--global-batch", "0"],
     "--global-batch must be >= 1"),
    (BASE + ["--model", "llama2-13b", "--gpus", "64", "--gpu-memory", "lots"],
     "cannot read a memory size from 'lots'"),
    (BASE + ["--model", "llama2-13b", "--gpus", "64", "--policies", "none,half"],
     "unknown policy 'half'"),
    (BASE + ["--model", "llama2-13b", "--gpus", "64", "--pp", "1,x"], "expected comma-separated integers"),
    (BASE + ["--model", "llama2-13b", "--gpus", "64", "--sp", "maybe"], "--sp takes on, off"),
    (BASE + ["--model", "llama2-13b", "--gpus", "64", "--measured", "/nonexistent/layers.json"],
     "measured layer file not found"),
    (BASE + ["--model", "llama2-13b", "--gpus", "64", "--gpu-memory", "8GiB", "--pp", "1",
             "--micro-batches", "1", "--attention", "cudnn", "--policies", "full"],
     "no layout fits in 8.0 GiB per GPU; the smallest needs"),
])
def test_bad_input_is_one_line_and_exit_2(capsys, argv, text):
    rc, out, err = run(capsys, *argv)
    assert rc == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("obscura: error: ") and text in lines[0], err


def test_malformed_measured_file(capsys, tmp_path):
    bad = tmp_path / "layers.json"
    bad.write_text(json.dumps({"format": "something-else", "entries": []}))
    rc, _, err = run(capsys, *BASE, "--model", "llama2-13b", "--gpus", "64", "--measured", str(bad))
    assert rc == 2 and "format must be 'obscura-sweep-layers/1'" in err


def test_outputs_are_not_corrupted_by_a_failed_run(capsys, tmp_path):
    js = tmp_path / "sweep.json"
    js.write_text('{"keep": true}')
    rc, _, _ = run(capsys, *BASE, "--model", "llama2-99b", "--gpus", "64", "--json", str(js))
    assert rc == 2 and json.loads(js.read_text()) == {"keep": True}


# ---- every bad input is one line, exit 2, no traceback, nothing written ----
from tests.obscura_jax.cli.commands import badinput  # noqa: E402

SW = ["sweep", "--model", "llama2-13b", "--seq-len", "2048", "--gpus", "8"] + SMALL
BAD = [
    (SW + ["--gpus", "0"], "--gpus must be >= 1"),
    (SW + ["--gpu-memory", "-80GiB"], "must be > 0 bytes"),
    (SW + ["--gpu-memory", "1e400"], "must be a finite size"),
    (SW + ["--peak-tflops", "nan"], "--peak-tflops must be a finite rate > 0"),
    (SW + ["--nvlink-gbps", "0"], "--nvlink-gbps must be a finite rate > 0"),
    (SW + ["--global-batch", "0"], "--global-batch must be >= 1"),
    (SW + ["--json", "/proc/s.json"], "--json /proc/s.json: cannot write there"),
    (SW + ["--csv", "{tmp}"], "is a directory"),
    (SW + ["--sp", "maybe"], "--sp takes on, off"),
    (SW + ["--pp", "1,x"], "expected comma-separated integers"),
    (SW + ["--measured", "{tmp}/latin1.json"], "is not UTF-8 text"),
    (SW + ["--top", "-1"], "--top must be >= 0"),
    # integers past their bounds, odd files
    (SW + ["--seq-len", "100000"], "--seq-len must be <= 32768, got 100000"),
    (SW + ["--gpus", str(2 ** 63)], f"--gpus must be <= 65536, got {2 ** 63}"),
    (SW + ["--global-batch", str(2 ** 40)], "--global-batch must be <= 16777216"),
    (SW + ["--json", "{tmp}/fifo"], "is a FIFO, not a regular file: refusing to replace it"),
    (SW + ["--measured", "{tmp}/fifo"], "--measured {tmp}/fifo: is a FIFO, not a regular file"),
    (SW + ["--measured", "{tmp}/deep.json"], "JSON nested 200000 deep"),
]


@pytest.mark.parametrize("argv,needle", BAD, ids=[" ".join(a[len(SW):])[:50] for a, _ in BAD])
def test_bad_inputs_are_one_line_and_exit_2(capsys, tmp_path, monkeypatch, argv, needle):
    (tmp_path / "latin1.json").write_bytes(b"\xff{}")
    badinput.odd_files(tmp_path)
    badinput.check(capsys, tmp_path, monkeypatch, argv, needle.replace("{tmp}", str(tmp_path)))


def test_a_small_model_ties_break_toward_less_recompute_and_its_sizes_show(capsys, tmp_path):
    """llama2-tiny on 8 GPUs (docs/cli.md's example): every policy ties at the best MFU
    (its time is the DP traffic's), so the tie-break decides the top rows: no
    recompute first, full last; sizes and times print in units that show them."""
    js = tmp_path / "sweep.json"
    rc, out, err = run(capsys, "sweep", "--model", "llama2-tiny", "--seq-len", "64", "--gpus", "8",
                       "--global-batch", "16", "--json", str(js), "--top", "10")
    assert rc == 0, err
    fits = [row for row in json.loads(js.read_text())["layouts"] if row["fits"]]
    best = f"{fits[0]['mfu']:.9g}"
    tied = [row for row in fits if f"{row['mfu']:.9g}" == best]
    assert len({row["policy"] for row in tied}) > 1               # the case this test is about
    assert tied[0]["policy"] == "none" and tied[-1]["policy"] == "full"
    keys = [(row["tp"] * row["pp"], row["micro_batch"]) for row in tied]
    assert keys == sorted(keys)
    table = [line for line in out.splitlines() if line[:3].strip().isdigit() and "%" in line]
    assert len(table) == 10
    for line, row in zip(table, fits):
        assert row["policy"] in line and "0.0 GiB" not in line and " 0.00 " not in line
        assert line.split()[8] in ("MiB", "KiB") and line.split()[10] in ("us", "ms")   # e.g. 4.0 MiB, 22 us
    assert "(0.00B params)" not in out and "0.0 GFLOP" not in out
