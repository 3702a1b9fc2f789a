"""The single byte range of an HTTP Range header."""

from __future__ import annotations

import re

_RANGE = re.compile(r"bytes=(\d*)-(\d*)")


class UnsatisfiableRange(Exception):
    """The range starts at or past the end of the resource."""


def parse_range(header: str | None, size: int) -> tuple[int, int] | None:
    """(start, end) with end exclusive, or None to send everything.

    A header that is not one valid byte range is ignored, as RFC 9110 allows.
    """
    if not header:
        return None
    match = _RANGE.fullmatch(header.strip())
    if not match or not (match[1] or match[2]):
        return None
    if not match[1]:
        suffix = int(match[2])
        if suffix == 0 or size == 0:
            raise UnsatisfiableRange
        return max(0, size - suffix), size
    start = int(match[1])
    if match[2] and int(match[2]) < start:
        return None
    if start >= size:
        raise UnsatisfiableRange
    end = min(size, int(match[2]) + 1) if match[2] else size
    return start, end
