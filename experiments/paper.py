"""The Obscura paper's setting and numbers, in one place (docs/obscura.md):
what the figure scripts reproduce and print beside our results. Data only."""
from __future__ import annotations

from planner.names import SYSTEMS  # noqa: F401  (the figures' labels)

# Evaluation platform: 8x A100-80GB, one stage per GPU, seq 4096, micro-batch 1.
NUM_STAGES = 8
SEQ_LEN, MICRO_BATCH = 4096, 1
PAPER_LIMIT = "80GiB"               # the A100-80GB the paper ran on
H200_LIMIT = "143771MiB"            # nvidia-smi's total on an H200 (BENCHMARKS.md)
SIZES = {"13b": 40, "18b": 56, "23b": 72, "28b": 88}   # layers (models/config.py)
FAMILIES = {"llama2": "Llama-2", "gpt3": "GPT-3"}

# Fig. 12: speedup of Obscura over DAPPLE+ (docs/obscura.md, section 9), over global batch 16/32/64.
PAPER_SPEEDUP = {("llama2", "18b"): (1.29, 1.31), ("llama2", "23b"): (1.29, 1.31),
                 ("llama2", "28b"): (1.22, 1.27), ("gpt3", "18b"): (1.32, 1.33),
                 ("gpt3", "23b"): (1.32, 1.33), ("gpt3", "28b"): (1.30, 1.32)}

# Fig. 16 (ablation): each step adds one of the paper's components to the last.
ABLATION_STEPS = (("relaxation", "relaxation only"), ("swap_recompute", "+ swapping-aware recompute"),
                  ("partition", "+ partition adjustment"), ("cmb", "+ CMB-Identifying (= Obscura)"))
# The planner runs behind them: "no_cmb" gives two steps (its even-partition best is
# exactly what partition=False would return, its final best adds Algorithm 1).
ABLATION_RUNS = {"relaxation": dict(cmb=False, swap=False, ip=False, partition=False),
                 "no_cmb": dict(cmb=False, swap=True, ip=True, partition=True),
                 "obscura": dict(cmb=True, swap=True, ip=True, partition=True)}

# Fig. 5: recompute overhead at stage 0, p = 4, m = 8, measured on GPUs (percent over
# no recompute), and the schedule each configuration is (generator, adjusted stages).
FIG5_PAPER = {"Recomp-None": 0.0, "Recomp-0": 19.0, "Recomp-1": 25.0, "Recomp-All": 33.0,
              "Strawman-0": 8.0, "Strawman-1": 17.0}
FIG5_CONFIGS = (("Recomp-None", "1f1b", None), ("Recomp-0", "recomp", 0), ("Recomp-1", "recomp", 1),
                ("Recomp-All", "recomp", "all"), ("Strawman-0", "strawman", 0), ("Strawman-1", "strawman", 1),
                ("Obscura-0", "obscura", 0), ("Obscura-1", "obscura", 1))
