"""docs/cli.md and docs/resources.md are what tools/gen_docs.py makes from the code now, and a
change to a command's help or a model's description that leaves them stale says how to refresh
them."""

from __future__ import annotations

import gen_docs
import pytest


def test_the_generated_reference_matches_the_code() -> None:
    found = gen_docs.stale()
    assert not found, gen_docs.stale_message(found)


def test_a_stale_file_is_named_with_the_command_that_refreshes_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    render = gen_docs.GENERATED["docs/cli.md"]
    monkeypatch.setitem(gen_docs.GENERATED, "docs/cli.md", lambda: render() + "changed\n")
    found = gen_docs.stale()
    assert found == ["docs/cli.md"]
    assert "docs/cli.md" in gen_docs.stale_message(found)
    assert "`make docs`" in gen_docs.stale_message(found)
    assert "\n+changed" in gen_docs.stale_message(found)
