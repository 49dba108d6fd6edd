"""tests/jax_compile_sharing.py: in the suite's processes a program compiled for one
emulated device is the cached program for another, and it runs where it is placed."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax._src import compiler
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from tests.jax_compile_sharing import share_across_devices


@pytest.fixture
def compiles(monkeypatch):
    """The names of the programs XLA compiles (one found in the persistent cache is
    not compiled)."""
    made = []
    real = compiler.backend_compile_and_load

    def counted(backend, module, *args, **kwargs):
        made.append(str(module.operation.attributes["sym_name"]).strip('"'))
        return real(backend, module, *args, **kwargs)
    monkeypatch.setattr(compiler, "backend_compile_and_load", counted)
    return made


def test_a_program_compiled_for_one_device_serves_another_and_runs_there(compiles):
    from jax._src import cache_key
    # tests/conftest.py applied it before any test compiled, to the suite's own cache
    assert cache_key._hash_serialized_compile_options.shares_across_devices
    assert jax.config.jax_compilation_cache_dir
    salt = float(np.random.default_rng().integers(1 << 30))     # a computation no earlier test compiled

    def f(w, x):
        return jnp.tanh(x @ w / 64).sum(0) + salt
    results = []
    for d in jax.devices()[2:5]:
        w = jax.device_put(jnp.arange(64 * 64.0).reshape(64, 64) / 4096, d)
        x = jax.device_put(jnp.arange(8 * 64.0).reshape(8, 64) / 512 - 0.5, d)
        y = jax.jit(f).lower(w, x).compile()(w, x)
        assert y.devices() == {d}
        results.append(np.asarray(y))
    assert compiles.count("jit_f") == 1, compiles
    np.testing.assert_array_equal(results[0], results[1])
    np.testing.assert_array_equal(results[0], results[2])


def test_a_mesh_program_serves_another_mesh_of_the_same_shape(compiles):
    salt = float(np.random.default_rng().integers(1 << 30))

    def f(w, x):
        return jnp.tanh(x @ w / 64).sum() + salt
    results = []
    devices = jax.devices()
    for group in ([0, 1, 2, 3], [4, 5, 6, 7], [5, 4, 7, 6]):
        mesh = Mesh(np.array([devices[i] for i in group]).reshape(2, 2), ("data", "model"))
        w = jax.device_put(jnp.arange(64 * 64.0).reshape(64, 64) / 4096, NamedSharding(mesh, PartitionSpec(None, "model")))
        x = jax.device_put(jnp.arange(8 * 64.0).reshape(8, 64) / 512 - 0.5, NamedSharding(mesh, PartitionSpec("data")))
        y = jax.jit(f).lower(w, x).compile()(w, x)
        assert y.sharding.device_set == {devices[i] for i in group}
        results.append(float(y))
    assert compiles.count("jit_f") == 1, compiles
    assert results[0] == results[1] == results[2]


def test_it_applies_once():
    assert share_across_devices() and share_across_devices()
    from jax._src import cache_key
    assert cache_key._hash_serialized_compile_options.shares_across_devices

