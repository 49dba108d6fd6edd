"""scripts/device/layer_recompute_span.py: bad spans are one line and exit 2 (the GPU run itself:
results/h200/profile_v3/diag_layer.json)."""
import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "device" / "layer_recompute_span.py"


def _main():
    spec = importlib.util.spec_from_file_location("layer_recompute_span", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.main


@pytest.mark.parametrize("spans,needle", [("1,x", "comma list of whole numbers"), ("0,2", ">= 1 each"),
                                          ("1,9", "llama2-tiny has 4 layers")])
def test_bad_spans_are_one_line(tmp_path, capsys, spans, needle):
    rc = _main()(["--model", "llama2-tiny", "--spans", spans, "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and needle in err and "Traceback" not in err
    assert not list(tmp_path.iterdir())
