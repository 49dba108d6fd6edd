"""The Python API with an offloading RecomputePolicy as the run's policy (what a
checkpoint-policy experiment passes): it trains, its summary is JSON, its report
and trace tell device from host bytes, and check() finds the unpipelined model's
losses and params."""
import json

import models
import obscura_jax
from obscura_jax import RunConfig
from schedules.formats.trace import check_trace_events


def test_train_with_a_recompute_policy_that_offloads_equals_the_reference():
    policy = models.resolve_policy("none", "llama", offload="mlp_gate,mlp_up")
    run = RunConfig(policy=policy, stages=2, microbatches=2, seq_len=16, steps=2, cost_reps=1)
    result = obscura_jax.train(run, devices="cpu:2")
    summary = json.loads(json.dumps(result.summary))          # JSON as it is
    assert summary["policy"] == policy.name
    assert summary["offload"]["ops"] == ["mlp_gate", "mlp_up"] and summary["offload"]["memory_kinds"] == ["pinned_host"]
    assert summary["offload"]["note"] and "RAM" in summary["offload"]["note"]    # CPU: one memory, two kinds
    for st in summary["stages"]:
        assert st["policy"] == policy.to_json()
        host = st["residual_host_bytes_per_microbatch"]
        assert host > 0 and st["residual_memory_kinds"] == {"device": st["residual_bytes_per_microbatch"],
                                                            "pinned_host": host}
        # 1F1B on 2 stages, 2 micro-batches: stage 0 holds both, stage 1 one at a time
        assert st["peak_host_bytes"] == host * (2 if st["units"][0] == 0 else 1)
        assert st["offload_bytes_per_iteration"] == {"to_host": 2 * host, "from_host": 2 * host}
    assert summary["costs"]["act_bytes"] == [st["residual_bytes_per_microbatch"] for st in summary["stages"]]
    report = result.report()
    assert "host/mb" in report and "offload: mlp_gate, mlp_up kept in pinned_host memory" in report
    trace = result.trace()
    check_trace_events(trace)
    forwards = [e for e in trace["traceEvents"] if e.get("cat") == "F"]
    assert forwards and all(e["args"]["to_host_bytes"] > 0 for e in forwards)
    assert trace["otherData"]["offload"]["residual_host_bytes_per_microbatch"] == [
        st["residual_host_bytes_per_microbatch"] for st in summary["stages"]]
    check = result.check()
    assert check["equal"], check
