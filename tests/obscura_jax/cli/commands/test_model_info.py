"""`obscura model-info` through the one CLI entry point."""
import json
import time

import pytest

from obscura_jax.cli.main import main


def test_model_info_prints_and_writes_json(tmp_path, capsys):
    out = tmp_path / "a.json"
    t0 = time.perf_counter()
    assert main(["model-info", "llama2-13b", "--json", str(out)]) == 0
    elapsed = time.perf_counter() - t0
    text = capsys.readouterr().out
    assert "13,015,864,320 params" in text and "cmb" in text
    info = json.loads(out.read_text())
    assert info["params"] == 13_015_864_320
    assert set(info["policies"]) == {"none", "full", "selective", "mlp", "cmb"}
    assert 0.25 <= info["policies"]["cmb"]["saving_vs_none"] <= 0.65
    assert {"act_bytes"} == set(info["unit_kinds"]["mlp"]["ops"]["mlp_act"])
    assert elapsed < 300     # abstract shapes: 13B parameters made for real would not fit this machine's memory


def test_model_info_tiny_with_options(tmp_path):
    out = tmp_path / "t.json"
    assert main(["model-info", "gpt3-tiny", "--seq-len", "64", "--micro-batch", "3",
                 "--attention", "xla", "--json", str(out)]) == 0
    info = json.loads(out.read_text())
    assert (info["seq_len"], info["micro_batch"], info["attention_impl"]) == (64, 3, "xla")


@pytest.mark.parametrize("argv,msg", [
    (["nope-7b"], "unknown model 'nope-7b'; valid models:"),
    (["llama2-tiny", "--seq-len", "0"], "seq len must be a positive integer"),
    (["llama2-tiny", "--seq-len", "-8"], "seq len must be a positive integer"),
    (["llama2-tiny", "--micro-batch", "-1"], "micro-batch must be a positive integer"),
    (["gpt3-13b", "--seq-len", "4097"], "exceeds gpt3-13b's max_seq_len 4096"),
])
def test_bad_input_is_one_line_and_exit_2(argv, msg, tmp_path, capsys):
    out = tmp_path / "keep.json"
    out.write_text('{"kept": true}\n')
    assert main(["model-info", *argv, "--json", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("obscura: error: ") and msg in err and "\n" not in err
    assert json.loads(out.read_text()) == {"kept": True}  # nothing half-written


def test_unknown_attention_impl_is_rejected_by_the_parser(capsys):
    with pytest.raises(SystemExit) as e:
        main(["model-info", "llama2-tiny", "--attention", "flash"])
    assert e.value.code == 2


# ---- every bad input is one line, exit 2, no traceback, nothing written ----
from tests.obscura_jax.cli.commands import badinput  # noqa: E402

BAD = [
    (["model-info", "nosuch"], "nosuch"),
    (["model-info", "llama2-tiny", "--seq-len", "0"], "seq len must be a positive integer"),
    (["model-info", "llama2-tiny", "--micro-batch", "-1"], "micro-batch must be a positive integer"),
    (["model-info", "llama2-tiny", "--json", "/proc/i.json"], "--json /proc/i.json: cannot write there"),
    (["model-info"], "obscura model-info: error: the following arguments are required: model"),
    (["model-info", "llama2-tiny", "--attention", "x"], "argument --attention: invalid choice"),
    (["model-info", "llama2-tiny", "--model-module", "{tmp}/latin1.py"], "latin1.py"),
]


@pytest.mark.parametrize("argv,needle", BAD, ids=[" ".join(a[1:])[:50] for a, _ in BAD])
def test_bad_inputs_are_one_line_and_exit_2(capsys, tmp_path, monkeypatch, argv, needle):
    (tmp_path / "latin1.py").write_bytes(b"x = '\xff'\n")
    badinput.check(capsys, tmp_path, monkeypatch, argv, needle)
