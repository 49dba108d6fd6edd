"""scripts/bench/bench_engine.py's arguments reach the benchmark: GPU mode at the real shape
(seq 4096) by default, and --cpu-smoke at a length llama2-tiny takes (its sequences
stop at 256 tokens: at 4096 every smoke run was refused)."""
import bench_engine as E

from experiments import benchmark


def test_the_cpu_smoke_runs_at_a_length_the_tiny_model_takes(tmp_path, monkeypatch):
    seen = []
    monkeypatch.setattr(benchmark, "gpu_bench", lambda out, layers, seq_len, *a, **kw: seen.append(
        (seq_len, kw["cpu_smoke"])))
    assert E.main(["--gpu", "--cpu-smoke", "--out", str(tmp_path)]) == 0
    assert E.main(["--gpu", "--out", str(tmp_path)]) == 0
    assert E.main(["--gpu", "--cpu-smoke", "--seq-len", "128", "--out", str(tmp_path)]) == 0
    assert seen == [(64, True), (4096, False), (128, True)]
