"""Small schedules kept as text goldens: the action grid and the unit-cost chart.
Regenerate with OBSCURA_UPDATE_GOLDEN=1 after an intended change, and review the diff."""
import os
from pathlib import Path

import pytest

from schedules import StageCosts, generate, simulate
from schedules.formats.text import timeline_ascii
from tests.schedules.helpers import schedule_text

GOLDEN = Path(__file__).parent / "golden"
CASES = {
    "gpipe_p4_m8": ("gpipe", 4, 8, {}),
    "1f1b_p4_m8": ("1f1b", 4, 8, {}),
    "recomp0_p4_m8": ("recomp", 4, 8, {"adjusted": 0}),
    "recompall_p4_m8": ("recomp", 4, 8, {"adjusted": "all"}),
    "strawman0_p4_m8": ("strawman", 4, 8, {"adjusted": 0}),
    "strawman1_p4_m8": ("strawman", 4, 8, {"adjusted": 1}),
    "obscura1_p4_m8": ("obscura", 4, 8, {"adjusted": 1}),
    "obscura1_swap2_p4_m8": ("obscura", 4, 8, {"adjusted": 1, "swap_blocks": 2, "swap_fraction": 1.0}),
    "obscura2_p4_m16": ("obscura", 4, 16, {"adjusted": 2}),
    "1f1b_p2_m3": ("1f1b", 2, 3, {}),
}


def render(name, p, m, kw) -> str:
    s = generate(name, p, m, **kw)
    costs = StageCosts.uniform(p, 1.0, 2.0, 1.0, act_bytes=1.0, host_bandwidth=4.0)
    tl = simulate(s, costs)
    return (schedule_text(s) + f"\n# unit costs f=1 b=2 r=1, kept 1 byte/mb, host 4 bytes/unit: "
            f"makespan {tl.makespan:g}\n" + timeline_ascii(tl) + "\n")


@pytest.mark.parametrize("key", sorted(CASES))
def test_golden(key):
    path = GOLDEN / f"{key}.txt"
    text = render(*CASES[key])
    if os.environ.get("OBSCURA_UPDATE_GOLDEN"):
        path.write_text(text)
    assert path.exists(), f"missing golden {path}; run with OBSCURA_UPDATE_GOLDEN=1"
    assert text == path.read_text()


@pytest.mark.parametrize("module,name,kw", [
    ("gpipe", "gpipe", {}), ("one_f_one_b", "1f1b", {}), ("one_f_one_b", "recomp", {"adjusted": 0}),
    ("strawman", "strawman", {"adjusted": 0}), ("obscura", "obscura", {"adjusted": 1}),
])
def test_docstring_pictures_are_current(module, name, kw):
    import importlib
    doc = importlib.import_module(f"schedules.generators.{module}").__doc__
    tl = simulate(generate(name, 4, 8, **kw), StageCosts.uniform(4, 1.0, 2.0, 1.0))
    picture = "\n".join("    " + ln for ln in timeline_ascii(tl).splitlines())
    assert picture in doc


# Today's schedules: grids with stage-first actions on device rows, and charts
# with a third line naming each op's stage. Costs are per model stage.
ZOO_CASES = {
    "zbh1_p4_m8": ("zb-h1", 4, 8, {}, 4),
    "zbh1_capped_p4_m8": ("zb-h1-capped", 4, 8, {}, 4),
    "interleaved_zb_v2_p4_m8": ("interleaved-zb", 4, 8, {"virtual_stages": 2}, 8),
    "looped_bfs_v2_p4_m8": ("looped-bfs", 4, 8, {"virtual_stages": 2}, 8),
    "zbv_p4_m8": ("zb-v", 4, 8, {}, 8),
    "interleaved_v2_p4_m8": ("interleaved", 4, 8, {"virtual_stages": 2}, 8),
    "obscura_zbh1_1_migrate_p4_m8": ("obscura-zb-h1", 4, 8, {"adjusted": 1, "migrate": True}, 4),
    # no torch equivalent (torch.distributed.pipelining has no ZB-H2, ZB-1p/2p, V-Half or V-Min)
    "zbh2_p4_m8": ("zb-h2", 4, 8, {}, 4),
    "zb1p_p4_m8": ("zb-1p", 4, 8, {}, 4),
    "zb2p_p4_m8": ("zb-2p", 4, 8, {}, 4),
    "vhalf_p4_m8": ("v-half", 4, 8, {}, 8),
    "vmin_p4_m8": ("v-min", 4, 8, {}, 8),
}


@pytest.mark.parametrize("key", sorted(ZOO_CASES))
def test_zoo_golden(key):
    name, p, m, kw, n = ZOO_CASES[key]
    costs = StageCosts.uniform(n, 1.0, 2.0, 1.0, act_bytes=1.0, host_bandwidth=4.0)
    s = generate(name, p, m, costs=costs, **kw)
    tl = simulate(s, costs)
    text = (schedule_text(s) + f"\n# costs per stage f=1 b=2 (I=W=1) r=1: makespan {tl.makespan:g}\n"
            + timeline_ascii(tl) + "\n")
    path = GOLDEN / f"{key}.txt"
    if os.environ.get("OBSCURA_UPDATE_GOLDEN"):
        path.write_text(text)
    assert path.exists(), f"missing golden {path}; run with OBSCURA_UPDATE_GOLDEN=1"
    assert text == path.read_text()
