"""Per-op recompute choices: the integer program, the candidate sets and the residual bytes they keep."""
