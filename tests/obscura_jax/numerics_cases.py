"""Shared by test_numerics_llama.py and test_numerics_gpt.py (two files so that
pytest-xdist runs the two models in parallel). Acceptance: every schedule, policy and swap setting trains exactly like the plain
model. llama2-tiny and gpt3-tiny, p=4, m=8, 3 steps of AdamW, seed 0, fp32, on 4
emulated CPU devices: per-step losses within rtol 1e-5 of the unpipelined
single-device model (whole batch as one), step-1 gradients likewise, and the final
params within rtol 1e-5 (plus checks.tolerances' absolute term for Adam, see there)."""
import jax
import numpy as np

import models
from obscura_jax.run.checks import tolerances
from obscura_jax.run.data import BatchShape, open_data
from obscura_jax.runtime.executor import make_optimizer
from obscura_jax.runtime.placement import place_stages
from obscura_jax.run.reference import reference_train
from obscura_jax.run.run_config import RunConfig
from obscura_jax.run.trainer import train

P, M, STEPS, B, T = 4, 8, 3, 2, 16
CASES = [
    ("gpipe", {}),
    ("1f1b", {}),
    ("recomp", {"adjusted": 1}),
    ("recomp", {"adjusted": "all"}),
    ("strawman", {"adjusted": 1}),
    ("obscura", {"adjusted": 1, "swap_blocks": 2, "swap_fraction": 0.5}),
]
# Several chunks per device and the split backward (I/W): 8 model stages on the 4
# devices for interleaved (V = 2) and zb-v, I and W as their own programs for zb-*.
ZOO_CASES = [
    ("interleaved", {}),
    ("zb-h1", {}),
    ("zb-v", {}),
    ("obscura-interleaved", {"adjusted": 1}),
    ("obscura-zb-h1", {"adjusted": 1, "swap_blocks": 2, "swap_fraction": 0.5}),
    ("zb-h1-capped", {}),
    ("interleaved-zb", {}),
    ("looped-bfs", {}),
    ("obscura-interleaved-zb", {"adjusted": 1}),
]
ZOO_IDS = [f"{n}-{k}" for n, k in ZOO_CASES]
# Every zero-bubble family with a W that re-derives its inputs (--weight-grad
# rederive), one with the head's W at once too: the same training, less held.
REDERIVE_CASES = [
    ("zb-h1", {"weight_grad": "rederive"}),
    ("zb-v", {"weight_grad": "rederive", "head_weight_grad": "at-once"}),
    ("interleaved-zb", {"weight_grad": "rederive"}),
]
REDERIVE_IDS = [f"{n}-{k}" for n, k in REDERIVE_CASES]
# Across 4 processes, (model, schedule, kw), in one launch: every zoo schedule on
# llama2-tiny; on gpt3-tiny the first five, one of each kind of order (chunks in a loop,
# a split backward, a V-shape, Obscura on each). The processes move arrays whatever the
# model, and gpt3-tiny runs every zoo schedule on one process (test_numerics_gpt).
MP_ZOO_CASES = ([("llama2-tiny", n, k) for n, k in ZOO_CASES]
                + [("gpt3-tiny", n, k) for n, k in ZOO_CASES[:5]])
MP_ZOO_IDS = [f"{model}-{n}-{k}" for model, n, k in MP_ZOO_CASES]


def run_config(model, schedule, measured: bool = False, **kw):
    """`measured`: the path `obscura train` takes by default (costs measured, the
    measured timeline and its summary), else both switched off to save time."""
    return RunConfig(model=model, stages=P, microbatches=M, schedule=schedule, steps=STEPS, seed=0,
                     micro_batch_size=B, seq_len=T, measure_costs=measured, record_timeline=measured, **kw)


def make_reference(model):
    cfg = models.get_config(model)
    data = open_data("synthetic", model_vocab=cfg.vocab_size, seed=0)
    shape = BatchShape(M, B, T)
    batches = [data.batch(i, shape) for i in range(STEPS)]
    params0 = models.init_params(cfg, 0)
    grads = []
    losses, params = reference_train(cfg, params0, batches, make_optimizer(), first_grads=grads)
    return model, cfg, losses, jax.device_get(params), grads[0], data


IDS = [f"{n}-{k}" for n, k in CASES]


def adam_bound(ref_grad, atol, run):
    """Per-element absolute bound on the final params. Where the step-1 reference
    gradient is rounding noise (|g| <= 1e-6 max|g|; seen: -2.8e-9 against 2.6e-2 in
    gpt3-tiny's head), Adam's update g/sqrt(v) has the sign of that noise, so a correct
    pipeline may move the element the other way: up to 2 lr per step."""
    noise = np.abs(ref_grad) <= 1e-6 * np.abs(ref_grad).max()
    return np.where(noise, 2 * run.learning_rate * run.steps, atol)


def assert_params_match(got: dict, ref_params: dict, ref_grads: dict, run, cfg, what: str = "") -> None:
    """Final params within checks.tolerances, widened by adam_bound where the step-1
    reference gradient is rounding noise."""
    rtol, atol = tolerances(run, cfg)
    assert sorted(got) == sorted(ref_params), what
    for name in ref_params:
        for a, b, g in zip(jax.tree.leaves(got[name]), jax.tree.leaves(ref_params[name]),
                           jax.tree.leaves(ref_grads[name]), strict=True):
            a, b = np.asarray(a), np.asarray(b)
            bound = adam_bound(np.asarray(g), atol, run)
            worst = np.abs(a - b) - (bound + rtol * np.abs(b))
            assert worst.max() <= 0, (f"{what} {name}: max excess {worst.max():.3g} at "
                                      f"{np.unravel_index(worst.argmax(), a.shape)}")


def check_pipeline_equals_plain_model(reference, schedule, kw):
    model, cfg, ref_losses, ref_params, ref_grads, data = reference
    run = run_config(model, schedule, **kw)
    out = train(run, lambda p: place_stages(p, "cpu", P), log=lambda *_: None)
    pipe = out.pipeline
    assert len({d.id for d in pipe.placement.devices}) == P
    if kw.get("adjusted"):
        assert pipe.schedule.adjusted_stages and all(
            pipe.policies[s].name == "full" for s in pipe.schedule.adjusted_stages)
    if kw.get("swap_fraction"):
        assert out.swap_counters["bytes_out"] > 0

    np.testing.assert_allclose([s.loss for s in out.steps], ref_losses, rtol=1e-5)

    assert_params_match(out.stage_params(), ref_params, ref_grads, run, cfg)

    assert_step1_grads(pipe, data, ref_grads)


def assert_step1_grads(pipe, data, ref_grads, stacked: bool = False) -> None:
    """Step-1 gradients from fresh state equal the reference's (Adam would hide a wrong
    gradient scale); `stacked`: a stage mesh's accumulator, one partial sum per data
    shard on a leading axis, summed here."""
    states = pipe.init_state(0)
    tok, tgt = data.microbatches(0, pipe.shape)
    pipe.executor.run_actions(states, tok, tgt)
    for st in states:
        for name, tree in jax.device_get(st.grads).items():
            for a, b in zip(jax.tree.leaves(tree), jax.tree.leaves(ref_grads[name]), strict=True):
                a, b = np.asarray(a), np.asarray(b)
                np.testing.assert_allclose(a.sum(0) if stacked else a, b, rtol=1e-5,
                                           atol=1e-6 * np.abs(b).max(), err_msg=name)
