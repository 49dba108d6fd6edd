from obscura_jax.cli import entry

entry()
