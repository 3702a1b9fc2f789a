"""The test modules' names are unique across folders: pytest imports each by its basename
(the folders are not packages), so a second module of the same name stops the collection."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

TESTS = Path(__file__).parent


def test_no_two_test_modules_share_a_name() -> None:
    folders: dict[str, list[str]] = defaultdict(list)
    for module in TESTS.rglob("test_*.py"):
        folders[module.name].append(str(module.parent.relative_to(TESTS)))
    assert {name: where for name, where in folders.items() if len(where) > 1} == {}
