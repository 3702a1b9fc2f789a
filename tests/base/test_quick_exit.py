"""The cyclic collector frozen last at exit: handlers still run, buffered files still flush."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

# Prints, from handlers registered before and after freeze_at_exit, how many objects the
# collector holds frozen; leaves a buffered file open, written but not flushed.
_CHILD = """
import atexit, gc, sys
atexit.register(lambda: print("first", gc.get_freeze_count(), flush=True))
from diskferry.base.quick_exit import freeze_at_exit
freeze_at_exit()
atexit.register(lambda: print("later", gc.get_freeze_count(), flush=True))
left_open = open(sys.argv[1], "w")
left_open.write("kept")
"""


def test_the_collector_is_frozen_after_every_later_handler(tmp_path: Path) -> None:
    written = tmp_path / "left-open.txt"
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD, str(written)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    later, first = (line.split() for line in proc.stdout.splitlines())
    assert later == ["later", "0"]
    assert first[0] == "first" and int(first[1]) > 0
    assert written.read_text() == "kept"
