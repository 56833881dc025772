"""The README and docs/*.md link only to files and headings that exist, and the README links
every docs page (a page nobody links to drifts unread)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.workflow.project import REPO

PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
# [text](target) outside code: the target up to the first space or closing parenthesis
LINK = re.compile(r"(?<!`)\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"```.*?```", re.S)


def _links(page: Path) -> list[str]:
    text = FENCE.sub("", page.read_text())
    return [t for t in LINK.findall(text) if not re.match(r"[a-z]+:", t)]


def _anchors(page: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation but - and _ dropped, spaces to -."""
    headings = re.findall(r"^#{1,6} (.+)$", FENCE.sub("", page.read_text()), re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_resolves(page: Path) -> None:
    broken = []
    for target in _links(page):
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        missing_anchor = anchor and resolved.suffix == ".md" and anchor not in _anchors(resolved)
        if not resolved.exists() or missing_anchor:
            broken.append(target)
    assert not broken, f"{page.relative_to(REPO)} links to what does not exist: {broken}"


def test_the_readme_links_every_docs_page() -> None:
    linked = {(REPO / t.partition("#")[0]).resolve() for t in _links(REPO / "README.md")}
    orphans = [p.name for p in PAGES[1:] if p.resolve() not in linked]
    assert not orphans, f"docs pages the README does not link: {orphans}"


def test_the_link_check_finds_links_and_anchors() -> None:
    """A broken regex would pass every page."""
    assert len(_links(REPO / "README.md")) >= 10
    assert "what-is-verified-here-and-what-is-not" in _anchors(
        REPO / "docs" / "containers-and-clusters.md"
    )
    assert "comparing-runs-resultscompare" in _anchors(REPO / "docs" / "benchmarks.md")
