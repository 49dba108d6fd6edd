"""scripts/docs/doc_numbers.py: every figure the docs quote is what its source (a
committed results file, or the command a JSON example names) gives today, every
number in prose that looks like a result is one of them or listed as not a result,
and a figure edited by hand fails the check."""
import shutil

import pytest

import doc_numbers
import doc_values

ROOT = doc_numbers.ROOT


def test_every_quoted_figure_is_what_its_source_gives():
    assert doc_numbers.stale() == []
    assert doc_numbers.unsourced() == []


@pytest.mark.slow
def test_the_json_examples_are_what_their_commands_write():
    """docs/formats.md's schedule, trace, profile and plan examples (the plan: one
    28B plan search, ~10 s)."""
    assert doc_numbers.stale(examples=True) == []


def _copy_docs(tmp_path):
    (tmp_path / "docs").mkdir()
    shutil.copy(ROOT / "README.md", tmp_path / "README.md")
    for doc in (ROOT / "docs").glob("*.md"):
        shutil.copy(doc, tmp_path / "docs" / doc.name)
    return tmp_path


def _edit(path, old, new):
    text = path.read_text()
    assert text.count(old) >= 1, old
    path.write_text(text.replace(old, new, 1))


def test_a_figure_edited_by_hand_fails_the_check(tmp_path):
    """A copy of the docs with one figure changed: a prose value, a table cell, a
    JSON example's number, and a new figure that comes from no source. Each is named."""
    root = _copy_docs(tmp_path)
    assert doc_numbers.stale(root) == [] and doc_numbers.unsourced(root) == []
    repro, formats = root / "docs/reproduction.md", root / "docs/formats.md"
    name = "prof.llama2.attn.full_ms"
    right = doc_values.VALUES[name]()
    wrong = f"{float(right) + 0.001:.3f}"
    _edit(repro, f"<!-- value: {name} -->{right}<!-- end value -->", f"<!-- value: {name} -->{wrong}<!-- end value -->")
    assert doc_numbers.stale(root) == [f"docs/reproduction.md: value {name} reads {wrong!r}, its source gives {right!r}"]
    _edit(repro, "| Recomp-0 | +15.2% |", "| Recomp-0 | +15.3% |")       # a cell of a rendered table
    assert "docs/reproduction.md: a table differs from its CSV (python scripts/docs/reproduction_tables.py)" in \
        doc_numbers.stale(root)
    _edit(formats, '"num_stages": 8', '"num_stages": 9')              # the schedule example (simulate, no JAX)
    assert "docs/formats.md: example schedule differs from what its command writes" in \
        doc_numbers.stale(root, examples=("schedule",))
    _edit(root / "README.md", "## Results\n", "## Results\n\nObscura runs 1.234 s per iteration.\n")
    assert [u.split(": ", 1)[1] for u in doc_numbers.unsourced(root)] == ["1.234 s"]
    # --write puts every value and table back from its source (the unsourced sentence
    # stays: a person decides what it is)
    doc_numbers.write(root, examples=False)
    assert doc_numbers.stale(root) == []


def test_the_scan_finds_figures_and_skips_code_and_rendered_blocks(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "README.md").write_text(
        "It took 3.5 s and 12% of 80 GiB, 1.19x faster, 0.992 of it; `--limit 7 GiB` and\n"
        "<!-- value: cal.within -->1.4%<!-- end value --> are not scanned, nor a [link](x_1.5ms.md).\n"
        "```\nobscura ... 9.9 s\n```\nnor p = 4 stages or step 2.\n")
    found = [u.split(": ", 1)[1] for u in doc_numbers.unsourced(tmp_path)]
    assert found == ["3.5 s", "12%", "80 GiB", "1.19x", "0.992"]
