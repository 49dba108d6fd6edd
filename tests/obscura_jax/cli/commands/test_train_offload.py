"""`--offload OPS` on the command line: `obscura train` with its default flags
offloads, equals the unpipelined model (--check) and reports host bytes apart from
device bytes (against the same run without offload); `compare` runs it; bad sets are
one line, exit 2, nothing written."""
import json

import pytest

from obscura_jax.cli.main import main
from schedules.formats.trace import check_trace_events
from tests.obscura_jax.cli.commands.badinput import check

RUN = ["train", "--model", "llama2-tiny", "--stages", "4", "--microbatches", "8", "--devices", "cpu:4"]


def test_train_offload_check_equals_and_keeps_host_bytes_off_the_device(tmp_path, capsys):
    off, plain, trace = tmp_path / "off.json", tmp_path / "plain.json", tmp_path / "trace.json"
    assert main(RUN + ["--offload", "mlp_gate,mlp_up", "--check", "--no-progress", "--json", str(off),
                       "--trace", str(trace)]) == 0
    printed = capsys.readouterr().out
    assert "check vs unpipelined model" in printed and "(equal at" in printed
    assert "host/mb" in printed and "offload: mlp_gate, mlp_up kept in pinned_host memory" in printed
    # the same run without offload (fewer steps: per-micro-batch bytes and peaks do not depend on them)
    assert main(RUN + ["--no-progress", "--steps", "2", "--cost-reps", "1", "--json", str(plain)]) == 0
    a, b = json.loads(plain.read_text()), json.loads(off.read_text())
    assert b["check"]["equal"] and b["offload"]["ops"] == ["mlp_gate", "mlp_up"] and a["offload"]["ops"] == []
    for s, (p, o) in enumerate(zip(a["stages"], b["stages"], strict=True)):
        host = o["residual_host_bytes_per_microbatch"]
        assert host > 0 and p["residual_host_bytes_per_microbatch"] == 0 and p["peak_host_bytes"] == 0
        assert o["residual_bytes_per_microbatch"] + host == p["residual_bytes_per_microbatch"]
        assert o["residual_memory_kinds"] == {"device": o["residual_bytes_per_microbatch"], "pinned_host": host}
        # 1F1B: stage s holds 4 - s micro-batches at once, their offloaded part on the host; the
        # device peaks count none of it (they differ by that, give or take the inbox's messages,
        # which follow the issue order the measured costs give: 32 KiB each, far below it)
        assert o["peak_host_bytes"] == (4 - s) * host
        assert o["peak_activation_bytes"] < p["peak_activation_bytes"]
        assert o["accounted_peak_bytes"] < p["accounted_peak_bytes"]
        assert o["simulated_peak_bytes"] < p["simulated_peak_bytes"]
    assert b["offload"]["peak_host_bytes"] == sum(o["peak_host_bytes"] for o in b["stages"]) > 0
    assert b["offload"]["to_host_bytes_per_iteration"] == 8 * sum(o["residual_host_bytes_per_microbatch"]
                                                                   for o in b["stages"])
    data = json.loads(trace.read_text())
    check_trace_events(data)
    assert data["otherData"]["offload"]["residual_host_bytes_per_microbatch"] == [
        o["residual_host_bytes_per_microbatch"] for o in b["stages"]]
    backwards = [e for e in data["traceEvents"] if e.get("cat") == "B"]
    assert len(backwards) == 32 and all(e["args"]["from_host_bytes"] > 0 for e in backwards)


def test_compare_runs_every_schedule_with_the_offload(tmp_path, capsys):
    out = tmp_path / "cmp"
    assert main(["compare", "--schedules", "1f1b", "--offload", "mlp_act", "--out", str(out), "--stages", "2",
                 "--microbatches", "2", "--seq-len", "16", "--steps", "2", "--cost-reps", "1", "--devices", "cpu:2",
                 "--no-progress"]) == 0
    run = json.loads((out / "1f1b.json").read_text())
    assert run["offload"]["ops"] == ["mlp_act"] and all(st["residual_host_bytes_per_microbatch"] > 0
                                                        for st in run["stages"])


BAD = [
    (["--offload", "mlp_gate,,mlp_up"], "--offload: offload 'mlp_gate,,mlp_up' has an empty item"),
    (["--offload", ""], "--offload: offload names no op"),
    (["--offload", "nosuchop"], "unknown offload op name 'nosuchop' for llama"),
    (["--policy", "mlp", "--offload", "mlp_up"], "op(s) mlp_up cannot be both recomputed and offloaded"),
    (["--policy", "layer", "--offload", "mlp_up"], "cannot be combined with other ops, presets or offloading"),
]


@pytest.mark.parametrize("command", ["train", "compare"])
@pytest.mark.parametrize("extra, needle", BAD, ids=[" ".join(e) for e, _ in BAD])
def test_a_bad_offload_set_is_one_line(command, extra, needle, capsys, tmp_path, monkeypatch):
    outputs = ["--json", "{tmp}/run.json"] if command == "train" else ["--out", "{tmp}/cmp"]
    check(capsys, tmp_path, monkeypatch, [command, "--model", "llama2-tiny", "--devices", "cpu:4", *extra, *outputs],
          needle)
