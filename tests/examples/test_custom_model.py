"""examples/custom_model.py runs (a subprocess with a timeout) and passes its own check;
what its commands wrote shows the model's own names all the way through: model-info
reports the geglu family and ops in no built-in family, and the trained plan recomputes
ops of that family on some stage (per-op recompute on a model of one's own), whatever
family the planner picks."""
import json

import pytest

import models
from tests.examples.helpers import EXAMPLES, run_example


@pytest.mark.slow
def test_custom_model_runs_and_checks_itself(tmp_path, model_registry):
    r = run_example("custom_model.py", "--out", str(tmp_path), cwd=tmp_path)
    assert "losses equal to the unpipelined model: True -> OK" in r.stdout
    assert "op names its own: True" in r.stdout
    assert "geglu-tiny (geglu)" in r.stdout and "ffn_glu" in r.stdout          # model-info's table

    info = json.loads((tmp_path / "info.json").read_text())
    ops = {op for kind in info["unit_kinds"].values() for op in kind["ops"]}
    assert info["family"] == "geglu" and {"sdpa", "ffn_glu"} <= ops
    assert not ops & (set(models.LLAMA_OPS) | set(models.GPT_OPS))

    models.load_model_module(str(EXAMPLES / "geglu.py"))
    offered = models.get_family("geglu").preset("cmb")   # what the example offers
    res = json.loads((tmp_path / "run.json").read_text())
    assert res["model"] == "geglu-tiny"
    assert len(res["losses"]) == 2 and all(0 < x < 10 for x in res["losses"])
    recomputed = [set(st["policy"]["recompute"]) for st in res["stages"]]
    # op sets of what the profile offers, or whole units (`full`: the run lists every op)
    assert any(recomputed) and all(r <= offered or r >= offered for r in recomputed), recomputed
