"""Small hand-made profiles for planner tests (no JAX, no tracing: the model name
is not registered, so no traced residual check applies)."""
from __future__ import annotations

from dataclasses import replace

from planner.profile import OpProfile, Profile, UnitProfile

MB = 2 ** 20


def llama_units(scale: float = 1.0) -> dict:
    """Per-kind costs shaped like a Llama layer: MLP about twice the attention."""
    def ops(spec):
        return {n: OpProfile(t * scale, b * MB) for n, (t, b) in spec.items()}
    return {
        "embed": UnitProfile(0.05 * scale, 0.1 * scale, 5 * MB, 0.01 * MB, ops({"embed": (0.05, 0)})),
        "attn": UnitProfile(1.0 * scale, 2.0 * scale, 10 * MB, 1 * MB, ops({
            "attn_norm": (0.02, 1), "q": (0.1, 1), "k": (0.1, 1), "v": (0.1, 1), "q_rope": (0.01, 0),
            "k_rope": (0.01, 0), "attn_core": (0.4, 1), "attn_proj": (0.1, 0), "attn_res": (0.01, 0)})),
        "mlp": UnitProfile(2.0 * scale, 4.0 * scale, 20 * MB, 1 * MB, ops({
            "mlp_norm": (0.02, 1), "mlp_gate": (0.6, 2.7), "mlp_up": (0.6, 2.7), "mlp_act": (0.03, 2.7),
            "mlp_mul": (0.03, 2.7), "mlp_down": (0.6, 0), "mlp_res": (0.01, 0)})),
        "head": UnitProfile(0.5 * scale, 1.0 * scale, 5 * MB, 1 * MB, ops({
            "final_norm": (0.02, 1), "logits": (0.4, 6)})),
    }


def synthetic_profile(num_layers: int = 8, host_bandwidth: float = 20 * MB, p2p_bandwidth: float = 1e12,
                      p2p_latency: float = 0.0, model: str = "llama-synthetic", split: bool = False) -> Profile:
    """`split`: with a measured split backward per unit (I 60% and W 40% of its
    backward; W holding 60% of what the unit keeps with nothing recomputed, or, a W
    that re-derives its inputs, 30% for 50% more W time)."""
    units = llama_units()
    if split:
        units = {k: replace(u, input_grad_time=0.6 * u.bwd_time, weight_grad_time=0.4 * u.bwd_time,
                            weight_grad_bytes=0.6 * u.kept_bytes(()), weight_grad_rederive_time=0.6 * u.bwd_time,
                            weight_grad_rederive_bytes=0.3 * u.kept_bytes(())) for k, u in units.items()}
    return Profile(model, "synthetic", num_layers, 128, 1, host_bandwidth, p2p_bandwidth, p2p_latency,
                   tuple(units.items()))
