"""scripts/figures/check_figures.py: committed figure CSVs regenerate from their scripts
(a fast subset here; `python scripts/figures/check_figures.py` checks every CSV in full),
and scripts/docs/reproduction_tables.py: docs/reproduction.md's tables are the CSVs'."""
import check_figures
import reproduction_tables


def test_fast_subset_regenerates_the_committed_rows():
    """Fig. 12's smallest case (one plan on the measured profile, every family searched):
    every row it writes is in the committed CSV, byte for byte."""
    lines = []
    problems = check_figures.check(fast=True, only="results/figures/fig12", jobs=1, log=lines.append)
    assert problems == [], lines
    assert len(lines) == 1 and lines[0].startswith("ok")


def test_compare_names_what_differs(tmp_path):
    committed = check_figures.ROOT / "results/figures/fig05_bubbles.csv"
    fresh = tmp_path / "fig05_bubbles.csv"
    lines = committed.read_text().splitlines()
    fresh.write_text("\n".join(lines[:2]) + "\n")
    assert check_figures.compare(committed, fresh, subset=True) is None
    fresh.write_text("\n".join(lines[:1] + [lines[1].replace(",", ";", 1)]) + "\n")
    assert "1 of 1 recomputed rows differ" in check_figures.compare(committed, fresh, subset=True)
    assert "lines differ" in check_figures.compare(committed, fresh, subset=False)


def test_reproduction_doc_tables_are_the_csvs():
    assert reproduction_tables.main(["--check"]) == 0
