"""Stage meshes (obscura_jax.runtime.stage_mesh): a stage's programs on D x T devices equal the
single-device ones, parameter bytes per device are what the tensor layout leaves, and
the trainer runs every kind of schedule on the five layouts of the CPU acceptance matrix exactly like
the plain model (losses, step-1 gradients, final params). The whole family x layout
matrix through the CLI: scripts/layouts/layout_matrix.py (BENCHMARKS.md)."""
import dataclasses

import jax
import numpy as np
import pytest

import models
from models.tensor_parallel import tensor_specs
from obscura_jax.runtime.pipeline import build_program
from obscura_jax.run.data import BatchShape
from obscura_jax.runtime.placement import place_stages
from obscura_jax.runtime.stage_mesh import StageMesh, device_bytes
from obscura_jax.run.trainer import train
from tests.obscura_jax.numerics_cases import assert_params_match, assert_step1_grads, make_reference, run_config

pytestmark = pytest.mark.slow


def _mesh(first: int, data: int, tensor: int) -> StageMesh:
    return StageMesh(tuple(jax.devices()[first:first + data * tensor]), data, tensor)


def test_mesh_axes_and_shardings():
    m = _mesh(0, 2, 2)
    assert m.mesh.shape == {"data": 2, "tensor": 2} and m.lead == jax.devices()[0]
    assert m.batch.spec == jax.sharding.PartitionSpec("data")
    assert m.shard_bytes((4, 16, 64), np.float32, m.batch) == 2 * 16 * 64 * 4
    one = _mesh(3, 1, 1)
    assert one.single and isinstance(one.batch, jax.sharding.SingleDeviceSharding)
    with pytest.raises(ValueError, match="needs 4 devices"):
        StageMesh(tuple(jax.devices()[:3]), 2, 2)


def test_parameter_bytes_per_device_are_the_tensor_layouts():
    """Per device: every tensor-split leaf / T, every replicated leaf whole; read from
    the placed arrays' shardings."""
    cfg = models.get_config("llama2-tiny")
    rng = (1, 5)
    params = models.stage_params(models.init_params(cfg, 0), rng, cfg)
    specs = tensor_specs(cfg, params, 4)
    split = sum(a.nbytes for a, s in zip(jax.tree.leaves(params), jax.tree.leaves(
        specs, is_leaf=lambda x: isinstance(x, jax.sharding.PartitionSpec))) if "tensor" in tuple(s))
    whole = sum(a.nbytes for a in jax.tree.leaves(params))
    mesh = _mesh(0, 1, 4)
    placed = jax.device_put(params, mesh.param_shardings(cfg, params))
    assert device_bytes(placed) == whole - split + split // 4
    prog = build_program(cfg, rng, models.resolve_policy("none", "llama"), mesh, BatchShape(1, 2, 16))
    assert prog.params_bytes == device_bytes(placed)
    assert split > 0.9 * whole       # the norms are all that stays whole in attention/MLP units


@pytest.mark.parametrize("model, data, tensor, policy, split", [
    ("llama2-tiny", 2, 2, "none", False), ("gpt3-tiny", 2, 2, "full", True),
    ("llama2-tiny", 1, 4, "cmb", True), ("gpt3-tiny", 4, 1, "none", False)])
def test_mesh_programs_equal_the_plain_model(model, data, tensor, policy, split):
    """Two stages, each on its own D x T mesh: forward, then B or I + W, gradients
    summed over the data-stacked accumulator = jax.grad of the whole model."""
    jax.config.update("jax_default_matmul_precision", "highest")
    cfg = models.get_config(model)
    shape, parts = BatchShape(1, 4, 16), [(0, 5), (5, cfg.num_units)]
    params = models.init_params(cfg, 0)
    rng = np.random.default_rng(0)
    tok, tgt = (rng.integers(0, cfg.vocab_size, (4, 16)).astype(np.int32) for _ in range(2))
    pol = models.resolve_policy(policy, cfg.family)
    progs = [build_program(cfg, r, pol, _mesh(i * data * tensor, data, tensor), shape, split)
             for i, r in enumerate(parts)]
    st = [jax.device_put(models.stage_params(params, r, cfg), p.param_shardings) for r, p in zip(parts, progs)]
    y, res0 = progs[0].forward(st[0], jax.device_put(tok, progs[0].batch_sharding))
    loss, res1 = progs[1].forward(st[1], jax.device_put(y, progs[1].batch_sharding),
                                  jax.device_put(tgt, progs[1].batch_sharding))
    grads, dy = [p.zero_grads() for p in progs], progs[1].loss_weight(1)
    if split:
        grads[1], dx, held, _ = progs[1].input_grad(st[1], res1, dy, grads[1])
        grads[1], _ = progs[1].weight_grad(st[1], held, dy, grads[1])
        dx = jax.device_put(dx, progs[0].batch_sharding)
        grads[0], _, held, _ = progs[0].input_grad(st[0], res0, dx, grads[0])
        grads[0], _ = progs[0].weight_grad(st[0], held, dx, grads[0])
    else:
        grads[1], dx, _ = progs[1].backward(st[1], res1, dy, grads[1])
        grads[0], _, _ = progs[0].backward(st[0], res0, jax.device_put(dx, progs[0].batch_sharding), grads[0])
    ref_loss, ref = jax.value_and_grad(lambda p: models.model_loss(cfg, p, tok, tgt, pol))(params)
    np.testing.assert_allclose(float(loss), float(ref_loss), rtol=1e-5)
    for g in grads:
        assert all(a.shape[0] == data for a in jax.tree.leaves(g))   # one partial sum per data shard
        for name, tree in jax.device_get(g).items():
            for a, b in zip(jax.tree.leaves(tree), jax.tree.leaves(ref[name]), strict=True):
                np.testing.assert_allclose(a.sum(0), b, rtol=1e-5, atol=1e-6 * np.abs(b).max(), err_msg=name)


# The five layouts of the CPU acceptance matrix (scripts/layouts/layout_matrix.py), each with a
# schedule of another kind, both models.
LAYOUT_CASES = [
    ((2, 2, 2), "llama2-tiny", "zb-h1", {}),
    ((4, 2, 1), "gpt3-tiny", "obscura", {"adjusted": 1, "swap_blocks": 2, "swap_fraction": 0.5}),
    ((2, 1, 4), "llama2-tiny", "interleaved", {}),
    ((1, 2, 4), "gpt3-tiny", "1f1b", {}),
    ((4, 1, 2), "llama2-tiny", "zb-v", {}),
]


@pytest.fixture(scope="module")
def references():
    return {}


@pytest.mark.parametrize("layout, model, schedule, kw", LAYOUT_CASES,
                         ids=[f"{m}-{s}-{'x'.join(map(str, lay))}" for lay, m, s, _ in LAYOUT_CASES])
def test_layouts_train_like_the_plain_model(references, layout, model, schedule, kw):
    """The trainer's default path (measured costs, timeline): losses, final params and
    step-1 gradients (the stacked accumulator summed over data) equal the plain model."""
    if model not in references:
        references[model] = make_reference(model)
    _, cfg, ref_losses, ref_params, ref_grads, data = references[model]
    p, d, t = layout
    run = run_config(model, schedule, measured=True, **kw)
    run = dataclasses.replace(run, stages=p, data_parallel=d, tensor_parallel=t)
    out = train(run, lambda n: place_stages(n, "cpu", n), log=lambda *_: None)
    pipe = out.pipeline
    assert pipe.placement.layout == (d, t)
    assert len({dev.id for s in range(pipe.schedule.num_stages) for dev in pipe.placement.mesh(s).devices}) == \
        pipe.schedule.num_devices * d * t
    if kw.get("swap_fraction"):
        assert out.swap_counters["bytes_out"] > 0
    np.testing.assert_allclose([s.loss for s in out.steps], ref_losses, rtol=1e-5)
    assert_params_match(out.stage_params(), ref_params, ref_grads, run, cfg)
    assert_step1_grads(pipe, data, ref_grads, stacked=True)
