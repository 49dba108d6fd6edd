"""Stage meshes across processes through the CLI (2 processes x 4 emulated devices,
each launch bounded by a timeout; the launcher picks a free coordinator port): the
data axis split over the processes with the tensor axis inside each one, and whole
stage meshes per process; both `--check` equal to the plain model."""
import json

import pytest

from tests.obscura_jax.mp_helpers import crash_report, run

pytestmark = pytest.mark.slow
SHAPE = ["--microbatches", "4", "--micro-batch-size", "2", "--seq-len", "16", "--devices", "cpu",
         "--processes", "2", "--devices-per-process", "4", "--no-progress", "--cost-reps", "1", "--steps", "2",
         "--check"]


def _train(tmp_path, *extra) -> dict:
    out = tmp_path / "run.json"
    rc, text = run(["train", *extra, *SHAPE, "--json", str(out)], timeout=600)
    assert rc == 0, crash_report(text)
    res = json.loads(out.read_text())
    assert res["check"]["equal"], res["check"]
    return res


def test_data_axis_across_processes_tensor_inside(tmp_path):
    res = _train(tmp_path, "--model", "gpt3-tiny", "--schedule", "zb-h1", "--stages", "2", "--data-parallel", "2",
                 "--tensor-parallel", "2", "--data-across-processes")
    meshes = res["layout"]["stage_meshes"]
    # every stage mesh holds data row 0 in process 0 and row 1 in process 1 (devices named p<process>:cpu:<id>)
    assert all("2 data x 2 tensor" in m for m in meshes), meshes
    names = [m.split("[")[1].split("]")[0].split(", ") for m in meshes]
    assert all(n[0].startswith("p0:cpu:") and n[2].startswith("p1:cpu:") for n in names), names
    assert len(res["stages"]) == 2


def test_whole_stage_meshes_per_process(tmp_path):
    res = _train(tmp_path, "--model", "llama2-tiny", "--schedule", "interleaved", "--stages", "2",
                 "--data-parallel", "2", "--tensor-parallel", "2")
    assert {st["process"] for st in res["stages"]} == {0, 1} and len(res["stages"]) == 4


def test_a_mesh_that_would_span_processes_needs_the_flag(tmp_path):
    rc, text = run(["train", "--model", "llama2-tiny", "--stages", "1", "--data-parallel", "2",
                    "--tensor-parallel", "4", *SHAPE], timeout=300)
    assert rc == 2, crash_report(text)
    assert "stage mesh would span processes" in text and "--data-across-processes" in text
