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


CONTRACT = '''
import sys
sys.path.insert(0, {examples!r})
import geglu
import jax.numpy as jnp
import models

FAULT = {fault!r}
if FAULT == "exit on import":
    sys.exit(0)


class Mlp(geglu.GegluMlp):
    def __call__(self, x_BxTxD):
        y = super().__call__(x_BxTxD)
        if FAULT == "exit in a call":
            sys.exit(0)
        return {{"int32": lambda: y.astype(jnp.int32), "shape": lambda: y[:, :, :8],
                 "aux": lambda: (y, jnp.ones((3,)))}}.get(FAULT, lambda: y)()


class Head(geglu.GegluHead):
    def __call__(self, x, targets, tied=None):
        loss = super().__call__(x, targets, tied)
        return loss * jnp.nan if FAULT == "nan" else loss


ops = {{**geglu.OPS, "mlp": geglu.OPS["mlp"] + (("ffn_extra",) if FAULT == "untagged" else ())}}
models.register_family({family!r}, units={{"embed": geglu.GegluEmbed, "attn": geglu.GegluAttention, "mlp": Mlp,
                                          "head": Head}}, ops=ops, presets=geglu.PRESETS)
models.register_config(models.ModelConfig(
    name={family!r} + "-tiny", family={family!r}, vocab_size=64, hidden=32, num_layers=2, num_heads=2,
    num_kv_heads=2, ffn_hidden=64, max_seq_len=64, compute_dtype="float32", attention_impl="xla"))
'''
FAULTS = [
    ("int32", "model-info", "the int32 family's mlp unit (Mlp) returns int32 of shape (1, 16, 32): a unit returns "
                            "floats of shape (1, 16, 32) ([B, T, hidden])"),
    ("int32", "train", "the int32 family's mlp unit (Mlp) returns int32 of shape (2, 16, 32)"),
    ("shape", "model-info", "returns float32 of shape (1, 16, 8): a unit returns floats of shape (1, 16, 32)"),
    ("aux", "model-info", "returns an auxiliary loss of float32 of shape (3,): it must be a scalar float"),
    ("untagged", "model-info", "never tags 'ffn_extra' (checkpoint_name) in its forward, though the family registers "
                               "it among the mlp ops"),
    ("nan", "model-info", "nan-tiny gives a loss of nan on one layer, seed 0 and random tokens: a model's loss must "
                          "be finite"),
    ("exit on import", "model-info", "called sys.exit(0) while importing"),
    ("exit in a call", "model-info", "called sys.exit(0) at line 17 in __call__: a model module must not end the "
                                     "command"),
]


def test_a_user_family_is_held_to_the_unit_contract(capsys, tmp_path, monkeypatch):
    """model-info checks a module of the user's (train and compare do too, before
    building): each fault one line naming the module's file, exit 2, nothing written
    (an int32 MLP output trained into "internal error"; sys.exit(0) ended the command
    silently with 0)."""
    from tests.obscura_jax.cli.commands import badinput
    for fault, command, needle in FAULTS:
        family = fault.split()[0] + ("_call" if fault == "exit in a call" else "")
        module = tmp_path / f"mod_{family}.py"
        if not module.exists():
            module.write_text(CONTRACT.format(examples=str(ROOT / "examples"), fault=fault, family=family))
        argv = ([command, f"{family}-tiny", "--seq-len", "16"] if command == "model-info" else
                [command, "--model", f"{family}-tiny", "--seq-len", "16", "--steps", "2", "--stages", "2",
                 "--devices", "cpu:2"])
        err = badinput.check(capsys, tmp_path, monkeypatch, argv + ["--model-module", str(module), "--json", "o.json"],
                             needle)
        assert err.startswith(f"obscura: error: model module {module}"), err
