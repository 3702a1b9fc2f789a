"""README.md as a newcomer reads it: the quick start's two commands come first, and the first
tasks run as written, printing what README shows they print."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
QUICK_START = (
    "make demo   # disks, an image, an export, a VM, its backups and restores, all from manifests\n"
    "make test   # install what the tests need and run the whole suite, one process per core\n"
)
FIRST_TASKS = "## First tasks"
BLOCK = re.compile(r"^```(\w*)\n(.*?)^```$", re.MULTILINE | re.DOTALL)
VARIABLE = re.compile(r"[0-9a-f]*[0-9][0-9a-f.]*")
"""What differs from run to run in a line: numbers, ids, times, sizes (a word with a digit)."""
CUT = "..."
"""Where README's copy of a line leaves out what varies (a path, an id)."""


def blocks(text: str, language: str) -> list[str]:
    """The fenced code blocks of `text` in `language`, in order."""
    return [body for lang, body in BLOCK.findall(text) if lang == language]


def section(text: str, heading: str) -> str:
    """The part of `text` from `heading` to the next heading of its level."""
    start = text.index(heading)
    level = heading.split()[0] + " "
    end = text.find("\n" + level, start + len(heading))
    return text[start : end if end >= 0 else len(text)]


def _shape(line: str) -> str:
    """A line with whatever varies made the same, and its runs of spaces one space."""
    return " ".join(VARIABLE.sub("0", line).split())


def shown_matches(shown: str, printed: list[str]) -> bool:
    """Whether a line README shows is one of the lines printed, but for what varies and
    what README cut (`...`)."""
    parts = [re.escape(part) for part in _shape(shown).split(CUT)]
    pattern = re.compile(".*".join(parts))
    return any(pattern.fullmatch(_shape(line)) for line in printed)


def test_the_quick_start_is_the_first_thing_readme_runs() -> None:
    text = README.read_text()
    assert blocks(text, "sh")[0] == QUICK_START
    assert text.index("## Quick start") < text.index(FIRST_TASKS)


def test_readme_is_read_in_five_minutes() -> None:
    assert len(README.read_text().splitlines()) <= 200


def _stop_what_is_left(scratch: Path, group: int) -> None:
    """Stop what a run that failed halfway left: its daemons and their workers (each in a
    session of its own), then whatever else its process group holds (the HTTP server)."""
    for data in scratch.glob("*/data"):
        subprocess.run(
            [ROOT / ".venv/bin/diskferry", "serve", "--stop", "--data-dir", data],
            capture_output=True,
            timeout=120,
            check=False,
        )
    with contextlib.suppress(ProcessLookupError):
        os.killpg(group, signal.SIGKILL)


@pytest.mark.long
@pytest.mark.timeout(600)
def test_the_first_tasks_run_as_readme_gives_them(tmp_path: Path) -> None:
    tasks = section(README.read_text(), FIRST_TASKS)
    script = "set -euo pipefail\n" + "".join(blocks(tasks, "sh"))
    # a network namespace of its own: the fixed ports README uses (8000, 7443, 7444) are free
    # there whatever else runs on this machine
    env = {**os.environ, "TMPDIR": str(tmp_path), "HOME": str(tmp_path), "KUBECONFIG": ""}
    run = subprocess.Popen(
        ["unshare", "--net", "bash", "-c", f"ip link set lo up\n{script}"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        output, _ = run.communicate(timeout=540)
    finally:
        _stop_what_is_left(tmp_path, run.pid)
    printed = output.splitlines()
    assert run.returncode == 0, "\n".join(printed[-40:])
    expected = [line for block in blocks(tasks, "text") for line in block.splitlines()]
    assert len(expected) > 10
    missing = [line for line in expected if not shown_matches(line, printed)]
    assert not missing, f"README shows {missing}, which the tasks did not print:\n" + "\n".join(
        printed
    )


@pytest.mark.parametrize(
    ("shown", "line", "matches"),
    [
        (
            "diskferry: imported into .../vm1.img (raw)",
            "diskferry: imported into /a/b/vm1.img (raw)",
            True,
        ),
        ("NAME   PHASE   AGE", "NAME                PHASE AGE", True),
        ("virtualSize: 2.0 GiB", "virtualSize: 1.5 GiB", True),
        ("virtualSize: 2.0 GiB", "virtualSize: 2.0 MiB", False),
        ("disk root: full backup", "disk root: incremental backup", False),
    ],
)
def test_a_shown_line_matches_but_for_what_varies(shown: str, line: str, matches: bool) -> None:
    assert shown_matches(shown, [line]) is matches
