"""Experiments: the benchmark harnesses (the engine bench, the multi-GPU bench and
its report, the layer-recompute yardstick) and the paper figures' computations,
beside the library packages. They import the library (models, schedules, planner,
obscura_jax); nothing in the library imports them (tests/test_layering.py checks).
scripts/ parses their flags and draws their results (paper.py: the paper's setting
and numbers; figures.py: what each reproduced figure computes)."""
