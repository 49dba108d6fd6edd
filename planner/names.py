"""What tables call each system a plan is compared with (planner.baselines,
planner.families) and Obscura itself: `obscura plan` prints them, the paper's
figures label their bars with them."""
from __future__ import annotations

SYSTEMS = {"dapple": "DAPPLE", "dapple_plus": "DAPPLE+ (unit)", "dapple_plus_layer": "DAPPLE+ (layer)",
           "recomp": "Recomp-N", "ohp_cmb": "OHP-CMB", "strawman": "Strawman", "obscura": "Obscura",
           "interleaved_full": "Interleaved+full", "zb_h1_full": "ZB-H1+full"}
