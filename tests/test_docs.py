"""The README is a map, docs/ holds the rest, and docs/config.md is what the config's source says."""

import re
from pathlib import Path

from jobs import config_doc

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def test_every_local_link_of_the_readme_and_docs_names_a_file_that_exists():
    broken = []
    for page in PAGES:
        for target in re.findall(r"\]\(([^)#\s]+)[^)]*\)", page.read_text()):
            if "://" not in target and not (page.parent / target).exists():
                broken.append(f"{page.relative_to(REPO)}: {target}")
    assert not broken


def test_the_readme_is_a_map():
    readme = (REPO / "README.md").read_text()
    assert len(readme.splitlines()) <= 150
    for page in sorted((REPO / "docs").glob("*.md")):
        assert f"docs/{page.name}" in readme, page.name  # every page is reachable from the README


def test_the_config_reference_is_current_and_describes_every_key(tmp_path, monkeypatch):
    assert config_doc.main(["--check"]) == 0, "docs/config.md is stale: run python -m jobs.config_doc"
    undocumented = [row[0] for row in config_doc.rows() if not row[4]]
    assert not undocumented  # a new field needs its description in pubswap/config.py
    stale = tmp_path / "config.md"
    stale.write_text(config_doc.render().replace("`16384`", "`8192`"))
    monkeypatch.setattr(config_doc, "DOC", stale)
    assert config_doc.main(["--check"]) == 1
