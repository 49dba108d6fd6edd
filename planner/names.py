"""What tables call each system a plan is compared with (planner.baselines) and
Obscura itself: `obscura plan` prints them, the paper's figures label their bars
with them; and the base family of a generator name (planner.families' families are
labelled there)."""
from __future__ import annotations

SYSTEMS = {"dapple": "DAPPLE", "dapple_plus": "DAPPLE+ (unit)", "dapple_plus_layer": "DAPPLE+ (layer)",
           "recomp": "Recomp-N", "ohp_cmb": "OHP-CMB", "strawman": "Strawman", "obscura": "Obscura"}

_FAMILY_OF = {"gpipe": "gpipe", "1f1b": "1f1b", "recomp": "1f1b", "strawman": "1f1b", "obscura": "1f1b",
              "interleaved": "interleaved", "obscura-interleaved": "interleaved", "zb-h1": "zb-h1",
              "zb-h1-capped": "zb-h1", "obscura-zb-h1": "zb-h1", "zb-v": "zb-v",
              "interleaved-zb": "interleaved-zb", "obscura-interleaved-zb": "interleaved-zb",
              "looped-bfs": "looped-bfs"}


def family_of(schedule: str) -> str:
    """The base family of a generator name (obscura -> 1f1b, obscura-zb-h1 -> zb-h1)."""
    return _FAMILY_OF.get(schedule, schedule)
