"""obscura-jax runtime: stage placement, pipeline engine, host swapping, CLI, training."""
__version__ = "0.1.0"
