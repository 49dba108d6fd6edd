"""Emulate 8 CPU devices before any test imports JAX; skip GPU tests without a GPU."""
import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault("JAX_ENABLE_X64", "0")

import pytest  # noqa: E402


def _has_gpu() -> bool:
    try:
        import jax
        return any(d.platform == "gpu" for d in jax.devices())
    except Exception:
        return False


def pytest_collection_modifyitems(config, items):
    gpu_items = [i for i in items if "gpu" in i.keywords]
    if gpu_items and not _has_gpu():
        skip = pytest.mark.skip(reason="needs a CUDA GPU")
        for item in gpu_items:
            item.add_marker(skip)


@pytest.fixture
def model_registry():
    """Restore the model registry (families and configs) after a test that registers;
    user modules it loaded are forgotten, so the next load registers them again."""
    import sys

    from models import config, registry

    families, configs = dict(registry._FAMILIES), dict(config.CONFIGS)
    yield registry
    for name in [n for n in sys.modules if n.startswith("obscura_user_")]:
        del sys.modules[name]
    registry._FAMILIES.clear()
    registry._FAMILIES.update(families)
    config.CONFIGS.clear()
    config.CONFIGS.update(configs)
