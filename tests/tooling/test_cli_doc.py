"""scripts/docs/cli_doc.py: docs/cli.md's option tables are what `--help` says."""
import cli_doc


def test_docs_cli_md_is_current(capsys):
    assert cli_doc.main(["--check"]) == 0, capsys.readouterr().err


def test_render_fills_each_marked_block_and_keeps_the_prose():
    doc = "intro\n<!-- options: plan -->\nstale\n<!-- end options -->\nafter\n"
    out = cli_doc.render(doc)
    assert out.startswith("intro\n<!-- options: plan -->\n| option | default | meaning |")
    assert "| `--memory-limit G` | required |" in out and "stale" not in out
    assert out.endswith("<!-- end options -->\nafter\n")
