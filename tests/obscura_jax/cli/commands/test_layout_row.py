"""`--layout ROW` (obscura_jax.cli.commands.layout_row): a sweep row becomes train's flags,
explicit flags that disagree and bad rows are one line (exit 2, nothing written),
and a row runs as the stage meshes it names."""
import json

import pytest

from obscura_jax.cli.main import main
from obscura_jax.cli.commands.layout_row import load_row

ROW = {"micro_batch": 2, "tp": 2, "pp": 2, "sp": False, "dp": 2, "num_microbatches": 4, "policy": "cmb",
       "attention": "xla", "label": "2/2/2/off", "fits": True, "runnable": True, "not_runnable": None,
       "memory_per_gpu": 2 ** 20}


def sweep_file(tmp_path, *rows, **top):
    path = tmp_path / "sweep.json"
    path.write_text(json.dumps({"format": "obscura-sweep/1", "model": "llama2-tiny", "seq_len": 32,
                                **top, "layouts": list(rows)}))
    return path


def test_a_row_is_trains_flags(tmp_path):
    path = sweep_file(tmp_path, {**ROW, "fits": False, "memory_per_gpu": 3 * 2 ** 30},
                      ROW, {**ROW, "tp": 1, "sp": True})
    row = load_row(f"{path}:2")
    assert row.flags() == {"model": "llama2-tiny", "seq_len": 32, "stages": 2, "data_parallel": 2,
                           "tensor_parallel": 2, "micro_batch_size": 4, "microbatches": 4, "policy": "cmb"}
    assert row.attention == "xla" and row.note() is None and row.where == f"row 2 of {path}"
    assert load_row(str(path)).where == f"row 2 of {path}"         # FILE: the best row that fits and runs
    assert "replicates norms" in load_row(f"{path}:3").note()


def train(*argv):
    return main(["train", "--steps", "1", "--no-progress", *argv])


@pytest.mark.parametrize("rows, spec, extra, needle", [
    ([ROW], "{p}:2", [], "has rows 1..1, not 2"),
    ([ROW], "{p}:0", [], "has rows 1..1, not 0"),
    ([{**ROW, "fits": False, "memory_per_gpu": 3 * 2 ** 30}], "{p}:1", [], "does not fit in the sweep's GPU memory (it needs 3.0 GiB"),
    ([{**ROW, "fits": False}], "{p}", [], "no row of"),
    ([{**ROW, "runnable": False, "not_runnable": "heads not divisible"}], "{p}:1", [], "not runnable: heads not divisible"),
    ([{**ROW, "tp": 0}], "{p}:1", [], "'tp' must be a positive integer"),
    ([{**ROW, "attention": "flash"}], "{p}:1", [], "attention must be one of xla, cudnn"),
    ([ROW], "{p}:1", ["--stages", "4"], "--stages 4 disagrees with row 1 of"),
    ([ROW], "{p}:1", ["--micro-batch-size", "2"], "--micro-batch-size 2 disagrees with row 1 of"),
    ([ROW], "{p}:1", ["--policy", "none"], "--policy none disagrees"),
    ([ROW], "{p}:1", ["--tensor-parallel", "1"], "--tensor-parallel 1 disagrees"),
    ([ROW], "{p}:1", ["--model", "gpt3-tiny"], "--model gpt3-tiny disagrees"),
    ([ROW], "{p}:1", ["--plan", "x.json"], "--layout and --plan"),
    ([{**ROW, "attention": "cudnn"}], "{p}:1", ["--devices", "cpu:8"], "runs cuDNN attention, which needs a GPU"),
    ([{**ROW, "tp": 8, "dp": 1, "pp": 1}], "{p}:1", ["--devices", "cpu:8"], "attention heads (4) not divisible"),
])
def test_bad_rows_are_one_line(tmp_path, capsys, rows, spec, extra, needle):
    path = sweep_file(tmp_path, *rows)
    out = tmp_path / "run.json"
    assert train("--layout", spec.format(p=path), *extra, "--json", str(out)) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("obscura: error:") and needle in err and "\n" not in err
    assert not out.exists()


def test_bad_files_are_one_line(tmp_path, capsys):
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"format": "obscura-plan/1"}))
    for spec, needle in ((f"{other}:1", "is not an obscura-sweep/1 file"),
                         (f"{tmp_path / 'none.json'}:1", "not found"),
                         (str(sweep_file(tmp_path, ROW, model=7)) + ":1", "names no model")):
        assert train("--layout", spec) == 2
        err = capsys.readouterr().err.strip()
        assert needle in err and "\n" not in err


@pytest.mark.slow
def test_a_sweep_row_trains_on_its_stage_meshes(tmp_path, capsys):
    """`obscura sweep --json` on 8 GPUs of llama2-tiny, then `train --layout` of a row
    with every axis > 1: 2 stages of 2 data x 2 tensor devices, the whole micro-batch
    the row's x D, the row's micro-batches and policy."""
    sweep = tmp_path / "sweep.json"
    assert main(["sweep", "--model", "llama2-tiny", "--seq-len", "32", "--gpus", "8", "--global-batch", "8",
                 "--micro-batches", "1", "--pp", "2", "--tp", "2", "--sp", "on", "--policies", "cmb",
                 "--attention", "xla", "--measured", "none", "--json", str(sweep)]) == 0
    rows = json.loads(sweep.read_text())["layouts"]
    assert [(r["pp"], r["tp"], r["dp"], r["sp"], r["rank"], r["runnable"]) for r in rows] == [(2, 2, 2, True, 1, True)]
    capsys.readouterr()
    out = tmp_path / "run.json"
    assert train("--layout", f"{sweep}:1", "--devices", "cpu:8", "--steps", "2", "--cost-reps", "1",
                 "--json", str(out)) == 0
    assert "runtime replicates norms" in capsys.readouterr().out
    res = json.loads(out.read_text())
    assert res["layout"]["data"] == 2 and res["layout"]["tensor"] == 2 and res["layout"]["devices"] == 8
    assert (res["num_stages"], res["micro_batch_size"], res["num_microbatches"]) == (2, 2, rows[0]["num_microbatches"])
    assert res["policy"] == "cmb" and res["seq_len"] == 32 and res["model"] == "llama2-tiny"


def test_compare_takes_a_row_too(tmp_path, capsys):
    path = sweep_file(tmp_path, ROW)
    assert main(["compare", "--layout", f"{path}:1", "--microbatches", "8", "--out", str(tmp_path / "cmp")]) == 2
    err = capsys.readouterr().err.strip()
    assert "--microbatches 8 disagrees with row 1 of" in err and "\n" not in err
    assert not (tmp_path / "cmp").exists()
