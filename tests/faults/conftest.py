"""Fixtures of the fault tests: relays between diskferry and its peers."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from relay import Relay


@pytest.fixture
def relay() -> Iterator[Callable[[tuple[str, int] | str], Relay]]:
    """Start relays to given targets: relay(("127.0.0.1", port)) or relay("/path.sock")."""
    made: list[Relay] = []

    def start(target: tuple[str, int] | str) -> Relay:
        made.append(Relay(target))
        return made[-1]

    yield start
    for r in made:
        r.close()
