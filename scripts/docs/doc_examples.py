"""The JSON examples of docs/formats.md, each what a command writes (or a committed
file holds) today, abridged the same way every time: scripts/docs/doc_numbers.py renders
them between `<!-- example: NAME -->` and `<!-- end example -->`.

Abridging keeps every key; a list of objects keeps its first one and "...", a longer
list of plain values its first eight and "...", a sha256 its first 12 digits."""
from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from functools import lru_cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ELLIPSIS = "..."
KEEP = 8
WIDTH = 100


def abridge(value, keep: int = KEEP):
    if isinstance(value, dict):
        return {k: abridge(v, keep) for k, v in value.items()}
    if isinstance(value, list):
        if len(value) > 1 and all(isinstance(v, (dict, list)) for v in value):
            return [abridge(value[0], keep), ELLIPSIS]
        return [abridge(v, keep) for v in value[:keep]] + ([ELLIPSIS] if len(value) > keep else [])
    if isinstance(value, str) and len(value) == 64 and all(c in "0123456789abcdef" for c in value):
        return value[:12] + ELLIPSIS
    return value


def compact(value, width: int = WIDTH, col: int = 0) -> str:
    """JSON text of `value` starting at column `col`: an object or array on one line
    when it fits, else its items packed onto lines of at most `width` characters, a
    nested one that does not fit broken the same way."""
    flat = json.dumps(value)
    if col + len(flat) <= width or not isinstance(value, (dict, list)) or not value:
        return flat
    opener, closer = ("{", "}") if isinstance(value, dict) else ("[", "]")
    items = list(value.items()) if isinstance(value, dict) else [(None, v) for v in value]
    out, cur = opener, col + 1
    for i, (key, v) in enumerate(items):
        prefix = "" if key is None else json.dumps(key) + ": "
        sep = "" if i == 0 else ", "
        text = compact(v, width, cur + len(sep) + len(prefix))
        if i and ("\n" in text or cur + len(sep + prefix + text) >= width):
            out += ",\n" + " " * (col + 1)
            cur, sep = col + 1, ""
            text = compact(v, width, cur + len(prefix))
        piece = sep + prefix + text
        out += piece
        cur = len(piece.rsplit("\n", 1)[-1]) if "\n" in piece else cur + len(piece)
    return out + closer


def _run(argv: list[str], out_name: str) -> dict:
    """Run `obscura ARGV` from the repository root, writing OUT_NAME in a temporary
    folder (OUT in argv); the JSON it wrote."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / out_name
        cmd = [sys.executable, "-m", "obscura_jax", *[str(out) if a == "OUT" else a for a in argv]]
        r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
        if r.returncode != 0:
            raise SystemExit(f"{' '.join(argv)} failed: {r.stderr.strip()[-2000:]}")
        return json.loads(out.read_text())


def _block(data, source: str) -> str:
    return f"```json\n{compact(data)}\n```\n\n({source})\n"


SCHEDULE = ["simulate", "--schedule", "interleaved", "--stages", "4", "--microbatches", "8",
            "--adjusted", "all", "--schedule-json", "OUT"]
TRACE = ["simulate", "--schedule", "interleaved", "--virtual-stages", "2", "--stages", "4", "--microbatches", "8",
         "--fwd", "0.5", "--bwd", "1", "--trace", "OUT"]
PLAN = ["plan", "--profile", "results/h200/profile_llama2-13b.json", "--layers", "88", "--stages", "8",
        "--microbatches", "32", "--memory-limit", "80GiB", "--json", "OUT"]


def _command(argv: list[str], out: str) -> str:
    return "obscura " + " ".join(out if a == "OUT" else a for a in argv)


def schedule_example() -> str:
    data = _run(SCHEDULE, "sched.json")
    data["devices"] = [data["devices"][0][:6] + [ELLIPSIS], ELLIPSIS]
    return _block(abridge(data), f"abridged: `{_command(SCHEDULE, 'sched.json')}`")


def trace_example() -> str:
    """The metadata of device 0 and its first two stages' tracks, the first forward of
    its second stage, and otherData."""
    data = _run(TRACE, "trace.json")
    events = data["traceEvents"]
    second = min(e["tid"] for e in events if e.get("pid") == 0 and e["ph"] == "X" and e["tid"] > 0)
    keep = [next(e for e in events if e["ph"] == "M" and e["name"] == "process_name" and e["pid"] == 0)]
    keep += [next(e for e in events if e["ph"] == "M" and e["name"] == "thread_name" and e["pid"] == 0 and e["tid"] == t)
             for t in (0, second)]
    keep.append(next(e for e in events if e["ph"] == "X" and e["pid"] == 0 and e["tid"] == second))
    shown = {"traceEvents": keep + [ELLIPSIS], **{k: v for k, v in data.items() if k != "traceEvents"}}
    return _block(shown, f"abridged: `{_command(TRACE, 'trace.json')}`")


def profile_example() -> str:
    data = json.loads((ROOT / "results/h200/profile_llama2-13b.json").read_text())
    attn = dict(data["units"]["attn"])
    first = next(iter(attn["ops"]))
    attn["ops"] = {first: attn["ops"][first], ELLIPSIS: {}}
    data["units"] = {"attn": attn, **{k: {} for k in data["units"] if k != "attn"}}
    keys = [k for k in data if k not in ("units",)][:10] + ["units"]
    return _block({k: data[k] for k in keys} | ({ELLIPSIS: ELLIPSIS} if len(data) > len(keys) else {}),
                  "abridged from `results/h200/profile_llama2-13b.json`, measured on the H200")


def plan_example() -> str:
    data = abridge(_run(PLAN, "plan_28b.json"))
    return _block(data, f"abridged: `{_command(PLAN, 'plan_28b.json')}`")


EXAMPLES = {"schedule": schedule_example, "trace": trace_example, "profile": profile_example, "plan": plan_example}


@lru_cache(maxsize=None)
def rendered(name: str) -> str:
    if name not in EXAMPLES:
        raise SystemExit(f"unknown example {name!r}: add it to scripts/docs/doc_examples.py")
    return EXAMPLES[name]()
