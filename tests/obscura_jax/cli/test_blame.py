"""Errors blamed on the code that raised them (obscura_jax.cli.blame): an exception
raised in a user's model module is one line naming its file and line, exit 2, not
"internal error (a bug)"; an error of our own is still a bug."""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

BROKEN = '''
import sys
sys.path.insert(0, {examples!r})
import geglu   # registers geglu-tiny
import models


class BrokenMlp(geglu.GegluMlp):
    def __call__(self, x_BxTxD):
        raise ValueError("expert routing table is empty")


models.register_family("broken", units={{"embed": geglu.GegluEmbed, "attn": geglu.GegluAttention,
                                        "mlp": BrokenMlp, "head": geglu.GegluHead}},
                       ops=geglu.OPS, presets=geglu.PRESETS)
models.register_config(models.ModelConfig(
    name="broken-tiny", family="broken", vocab_size=64, hidden=32, num_layers=2, num_heads=2,
    num_kv_heads=2, ffn_hidden=64, max_seq_len=64, compute_dtype="float32", attention_impl="xla"))
'''


def test_a_user_module_raising_in_call_is_one_line_naming_its_file_and_line(tmp_path):
    module = tmp_path / "broken.py"
    module.write_text(BROKEN.format(examples=str(ROOT / "examples")))
    line = next(i for i, text in enumerate(module.read_text().splitlines(), 1) if "raise ValueError" in text)
    r = subprocess.run([sys.executable, "-m", "obscura_jax", "model-info", "broken-tiny", "--seq-len", "16",
                        "--model-module", str(module)], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr == (f"obscura: error: model module {module} raised ValueError at line {line} in __call__: "
                        "expert routing table is empty\n")


def test_an_error_outside_user_code_stays_a_bug():
    from obscura_jax.cli import blame
    try:
        raise RuntimeError("ours")
    except RuntimeError as e:
        assert blame.blame_line(e) is None


def test_the_innermost_user_frame_is_found_through_causes(tmp_path, monkeypatch):
    from obscura_jax.cli import blame
    monkeypatch.setattr(blame, "_user_files", {})
    src = tmp_path / "user_mod.py"
    src.write_text("def f():\n    raise KeyError('k')\n")
    namespace: dict = {}
    exec(compile(src.read_text(), str(src), "exec"), namespace)
    blame.note_user_module(type("M", (), {"__file__": str(src)}), "user_mod.py")
    try:
        try:
            namespace["f"]()
        except KeyError as e:
            raise TypeError("wrapped by a library") from e
    except TypeError as e:
        assert blame.blame_line(e) == "model module user_mod.py raised KeyError at line 2 in f: 'k'"
