"""The docs a user copies from: the quick start's blocks are the files the quick-start test runs, and every link
between the docs leads to a page (and a heading) that exists."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import ROOT

DOCS = ROOT / "docs"
PAGES = [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]


def _blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```$", text, re.MULTILINE | re.DOTALL)


def test_the_quick_start_shows_the_files_its_test_runs():
    page = (DOCS / "quickstart.md").read_text()
    assert (DOCS / "quickstart" / "mysql_to_hive.py").read_text() in _blocks(page, "python")
    assert (DOCS / "quickstart" / "cdc.yaml").read_text() in _blocks(page, "yaml")


def _anchors(page: Path) -> set[str]:
    """GitHub's anchors of a page's headings: lower case, punctuation dropped, spaces as hyphens, repeats
    numbered."""
    seen: dict[str, int] = {}
    anchors = set()
    text = re.sub(r"^```.*?^```$", "", page.read_text(), flags=re.MULTILINE | re.DOTALL)
    for heading in re.findall(r"^#+ +(.+?) *$", text, re.MULTILINE):
        slug = re.sub(r"[^\w\- ]", "", heading.lower().replace("`", "")).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        anchors.add(slug if not count else f"{slug}-{count}")
    return anchors


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_link_between_the_docs_leads_somewhere(page):
    text = re.sub(r"^```.*?^```$", "", page.read_text(), flags=re.MULTILINE | re.DOTALL)
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):  # http(s):, mailto:
            continue
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        if not linked.exists():
            broken.append(f"{target}: no such file")
        elif anchor and linked.suffix == ".md" and anchor not in _anchors(linked):
            broken.append(f"{target}: no such heading in {linked.name}")
    assert not broken, broken
