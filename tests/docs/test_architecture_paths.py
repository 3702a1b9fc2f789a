"""Every module or folder docs/architecture.md names in a code span is one of the source tree,
so that moving or renaming a module breaks a test rather than the page."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "architecture.md"
SOURCE = ROOT / "src" / "diskferry"
NAMED = re.compile(r"`([\w/]+(?:\.py|/))`")
"""A code span naming a module (`runner/local.py`) or a folder (`host/embedded/`)."""


def missing(text: str, tree: Path) -> list[str]:
    """The modules and folders `text` names that no path under `tree` ends with."""
    paths = {p.relative_to(tree).as_posix() + ("/" if p.is_dir() else "") for p in tree.rglob("*")}
    named = set(NAMED.findall(text))
    return sorted(n for n in named if not any(("/" + p).endswith("/" + n) for p in paths))


def test_every_module_the_page_names_exists() -> None:
    assert NAMED.findall(PAGE.read_text()), "the page names no module"
    assert not missing(PAGE.read_text(), SOURCE)


def test_a_module_that_is_not_there_is_reported(tmp_path: Path) -> None:
    (tmp_path / "control" / "runtime").mkdir(parents=True)
    (tmp_path / "control" / "runtime" / "queue.py").write_text("")
    text = "`control/runtime/queue.py`, `runtime/queue.py`, `runtime/`, `runtime/gone.py`"
    assert missing(text, tmp_path) == ["runtime/gone.py"]
