"""Write the generated reference under docs/, or with --check say which of it is stale.

Run from the repository's root: `.venv/bin/python tools/gen_docs.py` (what `make docs` does).
"""

from __future__ import annotations

import argparse
import difflib
import itertools
import sys
from collections.abc import Callable
from pathlib import Path

import cli_reference
import resource_reference

ROOT = Path(__file__).resolve().parent.parent
REFRESH = "make docs"
"""The command that brings every generated file up to date."""

GENERATED: dict[str, Callable[[], str]] = {
    "docs/cli.md": cli_reference.render,
    "docs/resources.md": lambda: resource_reference.render(ROOT),
}
"""Each generated file, by its path from the repository's root, and what makes its text."""


def stale() -> list[str]:
    """The generated files whose text differs from what the code makes now."""
    out = []
    for path, render in GENERATED.items():
        target = ROOT / path
        if not target.exists() or target.read_text() != render():
            out.append(path)
    return out


DIFF_LINES = 40
"""How much of each stale file's difference the message shows."""


def _difference(path: str) -> str:
    """The start of the unified diff from the file `path` as it is to what the code makes."""
    target = ROOT / path
    was = target.read_text().splitlines() if target.exists() else []
    diff = difflib.unified_diff(was, GENERATED[path]().splitlines(), path, "made now", lineterm="")
    return "\n".join(itertools.islice(diff, DIFF_LINES))


def stale_message(paths: list[str]) -> str:
    """What to tell someone whose change left `paths` stale, with how each differs."""
    return (
        f"stale: {', '.join(paths)}. These files are made from the commands' help texts and "
        f"the resource models' descriptions, which have changed since: run `{REFRESH}` (or "
        "`.venv/bin/python tools/gen_docs.py`) and commit what it changes.\n"
        + "\n".join(_difference(path) for path in paths)
    )


def main() -> int:
    """Write every generated file; with --check write nothing and exit 1 if any is stale."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="Only say what is stale.")
    if parser.parse_args().check:
        found = stale()
        if found:
            print(stale_message(found), file=sys.stderr)
        return 1 if found else 0
    for path, render in GENERATED.items():
        (ROOT / path).write_text(render())
    return 0


if __name__ == "__main__":
    sys.exit(main())
