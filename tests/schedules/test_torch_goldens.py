"""Orders written by torch's own schedule generators (goldens/torch, made by
scripts/goldens/make_torch_goldens.py; torch is not imported here): every file imports,
validates and re-simulates, and where we claim torch's order ours equals it action
for action."""
import ast
import re
from pathlib import Path

import pytest

from schedules import StageCosts, generate, simulate
from schedules.formats.torch_csv import load_torch_csv
from tests.schedules.helpers import longest_path_times

GOLDENS = Path(__file__).parent / "goldens" / "torch"
FILES = sorted(GOLDENS.glob("*.csv"))
# torch file prefix -> our generator and its arguments (the same order)
OURS = {"interleaved1f1b_v2": ("interleaved", {"virtual_stages": 2}), "interleavedzb_v1": ("zb-h1", {}),
        "interleavedzb_v2": ("interleaved-zb", {"virtual_stages": 2}), "zbv": ("zb-v", {}),
        "loopedbfs_v2": ("looped-bfs", {"virtual_stages": 2})}


def _parts(path: Path) -> tuple[str, int, int]:
    prefix, p, m = re.fullmatch(r"(.*)_p(\d+)_m(\d+)", path.stem).groups()
    return prefix, int(p), int(m)


def test_every_generator_and_size_is_there_or_refused():
    made = {f.stem for f in FILES}
    refused = {line.split(":")[0] for line in (GOLDENS / "REFUSED.txt").read_text().splitlines()}
    want = {f"{pre}_p{p}_m{m}" for pre in (*OURS, "dualpipev", "gpipe") for p in (2, 4, 8) for m in (p, 2 * p, 4 * p)}
    assert made | refused == want and not made & refused
    assert refused == {"dualpipev_p2_m2", "dualpipev_p4_m4", "dualpipev_p8_m8"}      # m < 2p


@pytest.mark.parametrize("path", FILES, ids=lambda f: f.stem)
def test_golden_imports_validates_and_resimulates(path):
    prefix, p, m = _parts(path)
    notes = []
    s = load_torch_csv(path, notes=notes)
    assert s.num_microbatches == m and s.num_devices == p
    assert notes == ([f"torch CSV: skipped {p} REDUCE_GRAD cells (gradient reduction and FSDP sharding run no "
                      "stage compute; not modelled)"] if prefix == "gpipe" else [])
    costs = StageCosts.uniform(s.num_stages, 1.0, 2.0, 0.0)
    tl = simulate(s, costs)
    assert sum(st.compute for st in tl.stages) == pytest.approx(s.num_stages * m * 3)   # every action ran once
    if not s.overlapped:           # the helper knows no overlapped units; test_torch_csv checks those
        ref = longest_path_times(s, costs)
        assert tl.makespan == pytest.approx(max(e for _, e in ref.values()))


@pytest.mark.parametrize("path", [f for f in FILES if _parts(f)[0] in OURS], ids=lambda f: f.stem)
def test_ours_is_torchs_order_action_for_action(path):
    prefix, p, m = _parts(path)
    name, kw = OURS[prefix]
    theirs = load_torch_csv(path)
    ours = generate(name, p, m, **kw)
    same = ours.rows == theirs.rows and ours.stage_to_device == theirs.stage_to_device
    # the one documented difference: at m == p Megatron's interleaving (ours) runs
    # every forward first, torch's warms up with (V-1)p + 2(p-1-d) forwards
    assert same != (name == "interleaved" and m == p)


@pytest.mark.parametrize("p,m,want", [(4, 8, 27), (8, 32, 103)])
def test_torchs_zb_h1_makespans_at_unit_costs(p, m, want):
    s = load_torch_csv(GOLDENS / f"interleavedzb_v1_p{p}_m{m}.csv")
    assert simulate(s, StageCosts.uniform(p, 1.0, 2.0, 0.0)).makespan == want


def test_torchs_interleaved_zb_and_looped_bfs_makespans_at_unit_costs():
    unit = StageCosts.uniform(8, 1.0, 2.0, 0.0)
    assert simulate(load_torch_csv(GOLDENS / "interleavedzb_v2_p4_m4.csv"), unit).makespan == 27
    assert simulate(load_torch_csv(GOLDENS / "zbv_p4_m4.csv"), unit).makespan == 30
    assert simulate(load_torch_csv(GOLDENS / "loopedbfs_v2_p4_m8.csv"), unit).makespan == 57


def test_neither_the_package_nor_the_tests_import_torch():
    root = Path(__file__).resolve().parents[2]
    found = []
    for pkg in ("models", "schedules", "planner", "obscura_jax", "tests"):
        for path in (root / pkg).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                    [node.module or ""] if isinstance(node, ast.ImportFrom) else []
                found += [f"{path.relative_to(root)}: {n}" for n in names if n.split(".")[0] == "torch"]
    assert found == []
