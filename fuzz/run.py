"""Run one fuzz target under atheris: `python fuzz/run.py TARGET [libFuzzer options] [CORPUS]`.

`python fuzz/run.py --list` names the targets. The corpus folder given is seeded with the
target's well-formed inputs first.
"""

from __future__ import annotations

import sys
from pathlib import Path

import atheris

with atheris.instrument_imports(include=["diskferry"]):
    import fuzz_targets


def _seed(corpus: Path, name: str) -> None:
    corpus.mkdir(parents=True, exist_ok=True)
    for n, data in enumerate(fuzz_targets.seeds()[name]):
        (corpus / f"seed-{n}").write_bytes(data)


def main() -> None:
    """Fuzz the target named on the command line."""
    if sys.argv[1:] == ["--list"]:
        print("\n".join(fuzz_targets.TARGETS))
        return
    name, options = sys.argv[1], sys.argv[2:]
    target = fuzz_targets.TARGETS[name]
    for option in options:
        if not option.startswith("-"):
            _seed(Path(option), name)
    atheris.Setup([sys.argv[0], *options], target)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
