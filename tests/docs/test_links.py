"""Every link of README.md and docs/*.md to a file of the repository names one that exists,
and an anchor names one of its headings, so that moving or renaming a page breaks a test."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#+ (.+)$", re.MULTILINE)
CODE = re.compile(r"^```.*?^```$|`[^`]*`", re.MULTILINE | re.DOTALL)
"""Fenced blocks and code spans, whose brackets are no links."""


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces as hyphens."""
    kept = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return kept.replace(" ", "-")


def broken(page: Path) -> list[str]:
    """The links of `page` to a missing file or to an anchor its target lacks."""
    out = []
    prose = CODE.sub("", page.read_text())
    for target in LINK.findall(prose):
        if re.match(r"[a-z]+:", target):
            continue  # a URL, not a file of the repository
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        if not linked.exists():
            out.append(target)
            continue
        headings = HEADING.findall(linked.read_text()) if linked.suffix == ".md" else []
        if anchor and anchor not in {slug(h) for h in headings}:
            out.append(target)
    return out


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_link_to_the_repository_leads_somewhere(page: Path) -> None:
    assert not broken(page), f"{page.relative_to(ROOT)}: broken links {broken(page)}"


def test_a_heading_anchor_is_githubs() -> None:
    assert (
        slug("Local state, not part of the repository") == "local-state-not-part-of-the-repository"
    )
    assert slug("Import (`benchmarks/bench_import.py`)") == "import-benchmarksbench_importpy"
    assert slug("diskferry repo key list") == "diskferry-repo-key-list"
