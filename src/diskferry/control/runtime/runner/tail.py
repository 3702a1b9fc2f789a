"""The last lines of a file that may be huge, read from its end within a fixed number of bytes."""

from __future__ import annotations

import os
from pathlib import Path

TAIL_BYTES = 1 << 20
LINE_CHARS = 4096


def tail_lines(path: Path, lines: int, max_bytes: int = TAIL_BYTES) -> list[str]:
    """The last `lines` lines of `path` found in its last `max_bytes`, each cut at LINE_CHARS
    characters; [] when the file is missing."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return []
    try:
        size = os.fstat(fd).st_size
        start = max(0, size - max_bytes)
        data = os.pread(fd, size - start, start)
    finally:
        os.close(fd)
    text = data.decode(errors="replace")
    found = text.splitlines()
    if start > 0 and found:
        found = found[1:]  # the first line was cut by the window
    return [line[:LINE_CHARS] for line in found[-lines:]] if lines > 0 else []


def first_line(path: Path, max_bytes: int = LINE_CHARS) -> str | None:
    """The first line of `path` once it is whole (ends with a newline), else None."""
    try:
        with open(path, "rb") as f:
            head = f.read(max_bytes)
    except FileNotFoundError:
        return None
    line, newline, _ = head.partition(b"\n")
    return line.decode(errors="replace") if newline else None
